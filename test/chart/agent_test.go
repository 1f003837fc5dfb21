package chart_test

import (
	"path"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/spectrocloud/nodewright/internal/hostos"
)

// hostMount is one host folder or file in the agent's container: the host path, its hostPath
// type, where the container sees it, and whether read-only.
type hostMount struct {
	host, hostType, at string
	readOnly           bool
}

func (m hostMount) String() string {
	ro := ""
	if m.readOnly {
		ro = " ro"
	}
	return m.host + " (" + m.hostType + ") at " + m.at + ro
}

// The host mounts every agent has, and those of each setting. docs/agent.md lists the same,
// with why.
var (
	stateMount      = hostMount{"/var/lib/nodewright-agent", "DirectoryOrCreate", "/var/lib/nodewright-agent", false}
	networkdMount   = hostMount{"/etc/systemd/network", "DirectoryOrCreate", "/host/etc/systemd/network", false}
	networkdRead    = hostMount{"/etc/systemd/network", "DirectoryOrCreate", "/host/etc/systemd/network", true}
	oemMount        = hostMount{"/oem", "Directory", "/host/oem", false}
	networkdOthers  = []hostMount{{"/run/systemd/network", "DirectoryOrCreate", "/host/run/systemd/network", true}, {"/usr/local/lib/systemd/network", "DirectoryOrCreate", "/host/usr/local/lib/systemd/network", true}, {"/usr/lib/systemd/network", "Directory", "/host/usr/lib/systemd/network", true}}
	drbdMounts      = []hostMount{{"/etc/drbd.conf", "File", "/etc/drbd.conf", true}, {"/etc/drbd.d", "Directory", "/etc/drbd.d", true}, {"/var/lib/linstor.d", "DirectoryOrCreate", "/var/lib/linstor.d", true}, {"/var/lib/drbd", "DirectoryOrCreate", "/var/lib/drbd", false}, {"/run/drbd", "DirectoryOrCreate", "/var/run/drbd", false}}
	privilegedMount = []hostMount{{"/dev", "Directory", "/dev", false}, {"/run/lock", "DirectoryOrCreate", "/var/lock", false}}
	// What the agent reports of its node's OS: os-release everywhere, and on Kairos its
	// kairos-release, the boot entry's /run/cos and COS_STATE's boot assessment; with
	// agent.kairosUKI the host's efivarfs (a UKI node's boot counter).
	osReleaseMount = hostMount{"/etc/os-release", "File", "/host/etc/os-release", true}
	efivarsMount   = hostMount{"/sys/firmware/efi/efivars", "Directory", "/host/sys/firmware/efi/efivars", true}
	kairosMounts   = []hostMount{{"/etc/kairos-release", "File", "/host/etc/kairos-release", true}, {"/run/cos", "Directory", "/host/run/cos", true},
		{"/run/initramfs/cos-state", "DirectoryOrCreate", "/host/run/initramfs/cos-state", true}}
)

// checkEFIVars: the agent reads the boot counter where hostos reads it under --host-root,
// inside its read-only mount of the efivarfs itself (not of a folder above it, whose
// read-only bind would leave the efivarfs under it writable where the runtime cannot make a
// mount read-only recursively).
func checkEFIVars(t *testing.T, ds appsv1.DaemonSet) {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--host-root=/host") {
		t.Errorf("args %q: want --host-root=/host, under which the mount is", c.Args)
	}
	if want := "/host/" + hostos.LoaderBootCountPathFile; path.Dir(want) != efivarsMount.at {
		t.Errorf("the agent reads the boot counter at %s, not in the mount at %s", want, efivarsMount.at)
	}
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(efivarsMount.at, m.MountPath+"/") {
			t.Errorf("%s is mounted, above the efivarfs: its read-only bind would leave the efivarfs writable", m.MountPath)
		}
	}
}

// agentDaemonSet renders the chart with args and returns the agent's DaemonSet.
func agentDaemonSet(t *testing.T, args ...string) appsv1.DaemonSet {
	t.Helper()
	objs := render(t, args...)
	o, ok := find(objs, "DaemonSet", "nodewright-agent")
	if !ok {
		t.Fatalf("helm template %v renders no DaemonSet nodewright-agent", args)
	}
	if o.Metadata.Namespace != agentNS {
		t.Errorf("%s: want it in %s", o, agentNS)
	}
	var ds appsv1.DaemonSet
	o.decode(t, &ds)
	if n := len(ds.Spec.Template.Spec.Containers); n != 1 || len(ds.Spec.Template.Spec.InitContainers) > 0 {
		t.Fatalf("%s: %d containers and %d init containers, want one container", o, n, len(ds.Spec.Template.Spec.InitContainers))
	}
	return ds
}

// hostMounts lists the container's mounts of host paths, sorted, and fails the test on a
// mount of a volume that is neither a host path nor known.
func hostMounts(t *testing.T, ds appsv1.DaemonSet) []hostMount {
	t.Helper()
	volumes := map[string]corev1.Volume{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	var out []hostMount
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		v, ok := volumes[m.Name]
		if !ok || v.HostPath == nil {
			t.Errorf("the agent mounts volume %s, which is not a host path: add it to this test", m.Name)
			continue
		}
		typ := ""
		if v.HostPath.Type != nil {
			typ = string(*v.HostPath.Type)
		}
		out = append(out, hostMount{v.HostPath.Path, typ, m.MountPath, m.ReadOnly})
	}
	if len(out) != len(volumes) {
		t.Errorf("the agent's pod has %d volumes but its container mounts %d of them", len(volumes), len(out))
	}
	sortMounts(out)
	return out
}

func sortMounts(m []hostMount) {
	sort.Slice(m, func(i, j int) bool { return m[i].at < m[j].at })
}

func mounts(groups ...[]hostMount) []hostMount {
	var out []hostMount
	for _, g := range groups {
		out = append(out, g...)
	}
	sortMounts(out)
	return out
}

// TestAgentDaemonSet: the agent's DaemonSet is rendered by default, on the host's network, as
// root, not privileged, with only NET_ADMIN and NET_RAW, a read-only root, the downward API's
// node and namespace, its arguments from the values, every taint tolerated, and exactly the
// host mounts each setting needs.
func TestAgentDaemonSet(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		ds := agentDaemonSet(t)
		spec := ds.Spec.Template.Spec
		c := spec.Containers[0]
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("hostNetwork %v, dnsPolicy %q; want the host's network with ClusterFirstWithHostNet", spec.HostNetwork, spec.DNSPolicy)
		}
		if spec.HostPID || spec.HostIPC {
			t.Errorf("hostPID %v, hostIPC %v: the agent needs neither", spec.HostPID, spec.HostIPC)
		}
		if spec.PriorityClassName != "system-node-critical" {
			t.Errorf("priorityClassName %q, want system-node-critical", spec.PriorityClassName)
		}
		if !reflect.DeepEqual(spec.Tolerations, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}) {
			t.Errorf("tolerations %+v, want every taint tolerated", spec.Tolerations)
		}
		if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 30 {
			t.Errorf("terminationGracePeriodSeconds %v, want 30", spec.TerminationGracePeriodSeconds)
		}
		if spec.ServiceAccountName != "nodewright-agent" {
			t.Errorf("serviceAccountName %q, want nodewright-agent (the RBAC and the policy name it)", spec.ServiceAccountName)
		}
		if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
			u.RollingUpdate.MaxUnavailable == nil || u.RollingUpdate.MaxUnavailable.String() != "1" {
			t.Errorf("updateStrategy %+v, want RollingUpdate with maxUnavailable 1", u)
		}
		if ps := spec.SecurityContext; ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != 0 ||
			ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod securityContext %+v, want runAsUser 0 and the RuntimeDefault seccomp profile", ps)
		}
		sc := c.SecurityContext
		if sc == nil {
			t.Fatal("the agent's container has no securityContext")
		}
		if sc.Privileged == nil || *sc.Privileged {
			t.Error("the agent's container must say privileged: false by default")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("the agent's container must set allowPrivilegeEscalation: false")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Error("the agent's container must have a read-only root file system")
		}
		if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			!reflect.DeepEqual(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
			t.Errorf("capabilities %+v, want every one dropped but NET_ADMIN and NET_RAW", sc.Capabilities)
		}
		wantArgs := []string{"--host-os=SystemdNetworkd", "--host-root=/host", "--state-dir=/var/lib/nodewright-agent",
			"--profile-keys-configmap=" + releaseNS + "/nodewright-profile-keys"}
		if !reflect.DeepEqual(c.Args, wantArgs) || len(c.Command) > 0 {
			t.Errorf("command %q args %q, want the image's entrypoint with %q", c.Command, c.Args, wantArgs)
		}
		env := map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
		}
		if env["NODE_NAME"] != "spec.nodeName" || env["POD_NAMESPACE"] != "metadata.namespace" {
			t.Errorf("env %+v: want NODE_NAME from spec.nodeName and POD_NAMESPACE from metadata.namespace", c.Env)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
			t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
		}
		if got, want := hostMounts(t, ds), mounts([]hostMount{stateMount, networkdMount, osReleaseMount}, networkdOthers, drbdMounts); !reflect.DeepEqual(got, want) {
			t.Errorf("host mounts:\n  %v\nwant:\n  %v", got, want)
		}
	})
	for _, tc := range []struct {
		name  string
		args  []string
		mount []hostMount
		check func(t *testing.T, ds appsv1.DaemonSet)
	}{
		{"kairos", []string{"--set", "agent.hostOS=Kairos"}, mounts([]hostMount{stateMount, oemMount, networkdRead, osReleaseMount}, kairosMounts, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) {
				// No OS operations unless asked for: neither the host's PID namespace nor privileged.
				sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
				if ds.Spec.Template.Spec.HostPID || sc == nil || sc.Privileged == nil || *sc.Privileged {
					t.Errorf("hostPID %v, securityContext %+v: want neither by default on Kairos", ds.Spec.Template.Spec.HostPID, sc)
				}
				if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--kairos-os-operations=false") || !slices.Contains(args, "--systemd-units=false") {
					t.Errorf("args %q: want --kairos-os-operations=false and --systemd-units=false", args)
				}
			}},
		{"kairos-systemd-units", []string{"--set", "agent.hostOS=Kairos", "--set", "agent.systemdUnits=true"},
			mounts([]hostMount{stateMount, oemMount, networkdRead, osReleaseMount}, kairosMounts, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) {
				// The host's systemctl runs through the host's own nsenter, in /proc/1/root; no
				// OS operation.
				sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
				if !ds.Spec.Template.Spec.HostPID || sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("hostPID %v, securityContext %+v: want the host's PID namespace, privileged, still with a read-only root", ds.Spec.Template.Spec.HostPID, sc)
				}
				if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--systemd-units=true") || !slices.Contains(args, "--kairos-os-operations=false") {
					t.Errorf("args %q: want --systemd-units=true and --kairos-os-operations=false", args)
				}
			}},
		{"kairos-os-operations", []string{"--set", "agent.hostOS=Kairos", "--set", "agent.kairosOSOperations=true"},
			mounts([]hostMount{stateMount, oemMount, networkdRead, osReleaseMount}, kairosMounts, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) {
				// The OS operations run the host's own nsenter, in /proc/1/root.
				sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
				if !ds.Spec.Template.Spec.HostPID || sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("hostPID %v, securityContext %+v: want the host's PID namespace, privileged, still with a read-only root", ds.Spec.Template.Spec.HostPID, sc)
				}
				if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--kairos-os-operations=true") || !slices.Contains(args, "--systemd-units=true") {
					t.Errorf("args %q: want --kairos-os-operations=true and --systemd-units=true", args)
				}
			}},
		{"kairos-uki", []string{"--set", "agent.hostOS=Kairos", "--set", "agent.kairosUKI=true"},
			mounts([]hostMount{stateMount, oemMount, networkdRead, osReleaseMount}, kairosMounts, []hostMount{efivarsMount}, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) { checkEFIVars(t, ds) }},
		{"talos", []string{"--set", "agent.hostOS=Talos"}, mounts([]hostMount{stateMount, osReleaseMount}, drbdMounts), nil},
		{"no-drbd", []string{"--set", "agent.drbd.enabled=false"}, mounts([]hostMount{stateMount, networkdMount, osReleaseMount}, networkdOthers), nil},
		{"privileged", []string{"--set", "agent.privileged=true"}, mounts([]hostMount{stateMount, networkdMount, osReleaseMount}, networkdOthers, drbdMounts, privilegedMount),
			func(t *testing.T, ds appsv1.DaemonSet) {
				sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
				if sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("securityContext %+v: want privileged, still with a read-only root", sc)
				}
			}},
		{"node-selector", []string{"--set", "agent.nodeSelector.type=kwok", "--set", "agent.terminationGracePeriodSeconds=90"}, mounts([]hostMount{stateMount, networkdMount, osReleaseMount}, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) {
				spec := ds.Spec.Template.Spec
				if !reflect.DeepEqual(spec.NodeSelector, map[string]string{"type": "kwok"}) || *spec.TerminationGracePeriodSeconds != 90 {
					t.Errorf("nodeSelector %v, terminationGracePeriodSeconds %d: want the values'", spec.NodeSelector, *spec.TerminationGracePeriodSeconds)
				}
			}},
		{"storage-bond", []string{"--set", "agent.storageBond=bond0"}, mounts([]hostMount{stateMount, networkdMount, osReleaseMount}, networkdOthers, drbdMounts),
			func(t *testing.T, ds appsv1.DaemonSet) {
				if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--storage-bond=bond0") {
					t.Errorf("args %q: want --storage-bond=bond0, the bond the agent reports", args)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ds := agentDaemonSet(t, tc.args...)
			if got := hostMounts(t, ds); !reflect.DeepEqual(got, tc.mount) {
				t.Errorf("host mounts:\n  %v\nwant:\n  %v", got, tc.mount)
			}
			wantOS := map[string]string{"kairos": "Kairos", "kairos-os-operations": "Kairos", "kairos-systemd-units": "Kairos", "kairos-uki": "Kairos", "talos": "Talos"}[tc.name]
			if wantOS == "" {
				wantOS = "SystemdNetworkd"
			}
			if args := ds.Spec.Template.Spec.Containers[0].Args; len(args) == 0 || args[0] != "--host-os="+wantOS {
				t.Errorf("args %q with %v, want --host-os=%s first", args, tc.args, wantOS)
			}
			if tc.check != nil {
				tc.check(t, ds)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		for _, o := range render(t, "--set", "agent.enabled=false") {
			if o.Metadata.Namespace == agentNS || o.Metadata.Name == "nodewright-agent" || strings.HasPrefix(o.Metadata.Name, "nodewright-agent-") {
				t.Errorf("%s rendered with agent.enabled=false", o)
			}
		}
	})
}
