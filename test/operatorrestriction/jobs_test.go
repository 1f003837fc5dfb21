package operatorrestriction_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/migration"
)

// TestOperatorRunsOnlyCopyJobs: as the operator's ServiceAccount, the copy and verify Jobs the
// migration controller builds (vmvolumemigration.DataJob, with the copier image the chart
// gives the operator) are admitted in a VM's namespace; the same Job with any one thing that
// could reach the node (privilege, a capability, a host namespace, a host path, another image
// or command, API credentials...) or in the operator's, the agent's, the legacy or the
// kube-system namespace is refused, the message naming the field; RBAC refuses changing a Job
// and creating pods or workloads; and with RBAC widened to allow those, the policy still
// refuses them.
func TestOperatorRunsOnlyCopyJobs(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()

	t.Run("the migration's copy and verify Jobs are admitted", func(t *testing.T) {
		for _, checksum := range []nwv1.ChecksumAlgorithm{nwv1.ChecksumBLAKE3, nwv1.ChecksumSHA256} {
			s.migration.Spec.ChecksumAlgorithm = checksum
			for _, suffix := range []string{migration.SuffixCopy, migration.SuffixVerify} {
				job := s.copyJob(suffix+"-"+strings.ToLower(string(checksum)), suffix)
				if err := s.operator.Create(ctx, job); err != nil {
					t.Fatalf("the operator creates its %s Job (%s): %v", suffix, checksum, err)
				}
				got := &batchv1.Job{}
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
					t.Fatal(err)
				}
				if c := got.Spec.Template.Spec.Containers[0]; c.Image != copyImage || c.Args[0] != suffix {
					t.Errorf("Job %s runs %s %v, want %s %s", got.Name, c.Image, c.Args, copyImage, suffix)
				}
			}
		}
		s.migration.Spec.ChecksumAlgorithm = ""
	})

	type refusal struct {
		name string
		// namespace is where the Job is created; the VM's namespace when empty.
		namespace string
		change    func(*corev1.PodSpec)
		// job changes the rest of the Job.
		job  func(*batchv1.Job)
		rule string
	}
	container := func(spec *corev1.PodSpec) *corev1.Container { return &spec.Containers[0] }
	const c0 = "spec.template.spec.containers[0]"
	refusals := []refusal{
		{name: "in the agent's namespace", namespace: s.agent,
			rule: "metadata.namespace: the operator may not run a Job in " + s.agent + ", the node agent's privileged namespace"},
		{name: "in the operator's namespace", namespace: s.release,
			rule: "metadata.namespace: the operator may not run a Job in " + s.release + ", the operator's own namespace"},
		{name: "in the legacy namespace", namespace: s.legacy,
			rule: "metadata.namespace: the operator may not run a Job in " + s.legacy + ", the legacy DaemonSet's namespace"},
		{name: "in kube-system", namespace: "kube-system",
			rule: "metadata.namespace: the operator may not run a Job in kube-system, the control plane's namespace"},
		{name: "another image",
			change: func(p *corev1.PodSpec) { container(p).Image = "registry.example.com/edge/nodewright-copy:latest" },
			rule:   c0 + ".image must be the copier image " + copyImage + " (the operator's --copy-image), not registry.example.com/edge/nodewright-copy:latest"},
		{name: "an init container with another image",
			change: func(p *corev1.PodSpec) {
				init := *container(p).DeepCopy()
				init.Name, init.Image, init.VolumeDevices = "fetch", "busybox:1.36", nil
				p.InitContainers = []corev1.Container{init}
			},
			rule: "spec.template.spec.initContainers[0].image must be the copier image " + copyImage},
		{name: "another command",
			change: func(p *corev1.PodSpec) { container(p).Command = []string{"/bin/sh", "-c", "nsenter -t 1 -a"} },
			rule:   c0 + ".command must be [/usr/local/bin/nodewright-copy] and its args [copy|verify --src /dev/nodewright/source --dst /dev/nodewright/target --hash blake3|sha256 --json --progress --progress-interval 2s]"},
		{name: "another nodewright-copy command",
			change: func(p *corev1.PodSpec) { container(p).Args[0] = "serve" },
			rule:   c0 + ".command must be [/usr/local/bin/nodewright-copy] and its args [copy|verify --src /dev/nodewright/source --dst /dev/nodewright/target --hash blake3|sha256 --json --progress --progress-interval 2s]"},
		{name: "the copier by name, found on PATH",
			change: func(p *corev1.PodSpec) { container(p).Command = []string{"nodewright-copy"} },
			rule:   c0 + ".command must be [/usr/local/bin/nodewright-copy] and its args [copy|verify --src /dev/nodewright/source --dst /dev/nodewright/target --hash blake3|sha256 --json --progress --progress-interval 2s]"},
		{name: "the claim copied into its termination log, where the pod's status shows it",
			change: func(p *corev1.PodSpec) { container(p).Args[4] = "/dev/termination-log" },
			rule:   c0 + ".command must be [/usr/local/bin/nodewright-copy] and its args [copy|verify"},
		{name: "another option of the copier",
			change: func(p *corev1.PodSpec) { container(p).Args = append(container(p).Args, "--buffers", "16") },
			rule:   c0 + ".command must be [/usr/local/bin/nodewright-copy] and its args [copy|verify"},
		{name: "the termination message kept elsewhere",
			change: func(p *corev1.PodSpec) { container(p).TerminationMessagePath = "/tmp/result" },
			rule:   c0 + " must keep its termination message at /dev/termination-log (policy File) and its root file system read-only"},
		{name: "the termination message taken from the log",
			change: func(p *corev1.PodSpec) {
				container(p).TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
			},
			rule: c0 + " must keep its termination message at /dev/termination-log"},
		{name: "a writable root file system",
			change: func(p *corev1.PodSpec) { container(p).SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) },
			rule:   c0 + " must keep its termination message at /dev/termination-log (policy File) and its root file system read-only"},
		{name: "no memory limit",
			change: func(p *corev1.PodSpec) { delete(container(p).Resources.Limits, corev1.ResourceMemory) },
			rule:   c0 + ".resources.limits.memory must be set: a copy Job's container runs within limits of memory and ephemeral-storage"},
		{name: "no resources at all",
			change: func(p *corev1.PodSpec) { container(p).Resources = corev1.ResourceRequirements{} },
			rule:   c0 + ".resources.limits.memory must be set"},
		{name: "a volume mounted over a directory on PATH",
			change: func(p *corev1.PodSpec) {
				container(p).VolumeMounts = []corev1.VolumeMount{{Name: "target", MountPath: "/usr/local/bin"}}
				container(p).VolumeDevices = container(p).VolumeDevices[:1]
			},
			rule: c0 + ".volumeMounts is not allowed: a copy Job's container sets only"},
		{name: "a block device placed over the copier",
			change: func(p *corev1.PodSpec) { container(p).VolumeDevices[1].DevicePath = "/usr/local/bin/nodewright-copy" },
			rule:   c0 + ".volumeDevices[target].devicePath /usr/local/bin/nodewright-copy is not allowed: a copy Job's block devices go under /dev/nodewright/"},
		{name: "512 CPUs",
			change: func(p *corev1.PodSpec) {
				container(p).Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("512")}
			},
			rule: c0 + ".resources.requests.cpu 512 is not allowed: a copy Job's container may ask only for cpu up to 2, ephemeral-storage up to 1Gi, memory up to 1Gi"},
		{name: "64 GiB of memory",
			change: func(p *corev1.PodSpec) {
				container(p).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("64Gi")
			},
			rule: c0 + ".resources.limits.memory 64Gi is not allowed"},
		{name: "a device resource",
			change: func(p *corev1.PodSpec) { container(p).Resources.Limits["nvidia.com/gpu"] = resource.MustParse("1") },
			rule:   c0 + ".resources.limits.nvidia.com/gpu 1 is not allowed"},
		{name: "privileged",
			change: func(p *corev1.PodSpec) {
				// The API server refuses privileged with allowPrivilegeEscalation false itself.
				container(p).SecurityContext.AllowPrivilegeEscalation = nil
				container(p).SecurityContext.Privileged = ptr.To(true)
			},
			rule: c0 + ".securityContext.privileged must not be true"},
		{name: "privilege escalation",
			change: func(p *corev1.PodSpec) { container(p).SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
			rule:   c0 + ".securityContext.allowPrivilegeEscalation must be false"},
		{name: "privilege escalation not forbidden",
			change: func(p *corev1.PodSpec) { container(p).SecurityContext.AllowPrivilegeEscalation = nil },
			rule:   c0 + ".securityContext.allowPrivilegeEscalation must be false"},
		{name: "an added capability",
			change: func(p *corev1.PodSpec) {
				container(p).SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
			},
			rule: c0 + ".securityContext.capabilities.add must be empty: the copy Jobs add no capabilities, not SYS_ADMIN"},
		{name: "the default capabilities kept",
			change: func(p *corev1.PodSpec) { container(p).SecurityContext.Capabilities = nil },
			rule:   c0 + ".securityContext.capabilities.drop must hold ALL"},
		{name: "an SELinux type",
			change: func(p *corev1.PodSpec) {
				container(p).SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
			},
			rule: c0 + ".securityContext.seLinuxOptions is not allowed"},
		{name: "an unmasked /proc",
			change: func(p *corev1.PodSpec) {
				// The API server allows Unmasked only in a user namespace, which cannot have
				// block devices.
				p.HostUsers = ptr.To(false)
				container(p).VolumeDevices = nil
				container(p).SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount)
			},
			rule: c0 + ".securityContext.procMount is not allowed"},
		{name: "a container's own seccomp profile",
			change: func(p *corev1.PodSpec) {
				container(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost,
					LocalhostProfile: ptr.To("profiles/allow-all.json")}
			},
			rule: c0 + ".securityContext.seccompProfile.type Localhost is not allowed"},
		{name: "an unconfined container",
			change: func(p *corev1.PodSpec) {
				container(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			},
			rule: c0 + ".securityContext.seccompProfile.type Unconfined is not allowed"},
		{name: "a host port",
			change: func(p *corev1.PodSpec) {
				container(p).Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
			},
			rule: c0 + ".ports is not allowed: a copy Job's container sets only"},
		{name: "a Secret in the environment",
			change: func(p *corev1.PodSpec) {
				container(p).EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "db-credentials"}}}}
			},
			rule: c0 + ".envFrom is not allowed"},
		{name: "a hook the kubelet runs",
			change: func(p *corev1.PodSpec) {
				container(p).Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{
					Host: "169.254.169.254", Path: "/latest/meta-data/", Port: intstr.FromInt32(80)}}}
			},
			rule: c0 + ".lifecycle is not allowed"},
		{name: "the host's network",
			change: func(p *corev1.PodSpec) { p.HostNetwork = true },
			rule:   "spec.template.spec.hostNetwork must not be true"},
		{name: "the host's processes",
			change: func(p *corev1.PodSpec) { p.HostPID = true },
			rule:   "spec.template.spec.hostPID must not be true"},
		{name: "the host's IPC",
			change: func(p *corev1.PodSpec) { p.HostIPC = true },
			rule:   "spec.template.spec.hostIPC must not be true"},
		{name: "a host path",
			change: func(p *corev1.PodSpec) {
				p.Volumes = append(p.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
			},
			rule: "spec.template.spec.volumes[2] (host) is hostPath: the copy Jobs mount only PersistentVolumeClaims"},
		{name: "a ServiceAccount token",
			change: func(p *corev1.PodSpec) {
				p.Volumes = append(p.Volumes, corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{
					Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
						ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})
			},
			rule: "spec.template.spec.volumes[2] (token) is projected"},
		{name: "a Secret",
			change: func(p *corev1.PodSpec) {
				p.Volumes = append(p.Volumes, corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{
					Secret: &corev1.SecretVolumeSource{SecretName: "db-credentials"}}})
			},
			rule: "spec.template.spec.volumes[2] (creds) is secret"},
		{name: "the ServiceAccount's token mounted",
			change: func(p *corev1.PodSpec) { p.AutomountServiceAccountToken = nil },
			rule:   "spec.template.spec.automountServiceAccountToken must be false"},
		{name: "an unsafe sysctl",
			change: func(p *corev1.PodSpec) {
				p.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.core_pattern", Value: "|/tmp/x"}}
			},
			rule: "spec.template.spec.securityContext.sysctls is not allowed"},
		{name: "an unconfined pod",
			change: func(p *corev1.PodSpec) {
				p.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
			},
			rule: "spec.template.spec.securityContext.seccompProfile.type must be RuntimeDefault, not Unconfined"},
		{name: "no seccomp profile",
			change: func(p *corev1.PodSpec) { p.SecurityContext.SeccompProfile = nil },
			rule:   "spec.template.spec.securityContext.seccompProfile.type must be RuntimeDefault, not unset"},
		{name: "a runtime class",
			change: func(p *corev1.PodSpec) { p.RuntimeClassName = ptr.To("unsandboxed") },
			rule:   "spec.template.spec.runtimeClassName must not be set"},
		{name: "the node's own priority",
			change: func(p *corev1.PodSpec) { p.PriorityClassName = "system-node-critical" },
			rule:   "spec.template.spec.priorityClassName must not be set: a copy Job's pod sets only containers, volumes,"},
		{name: "a node of its choosing",
			change: func(p *corev1.PodSpec) { p.NodeName = "edge-1" },
			rule:   "spec.template.spec.nodeName must not be set"},
		{name: "a sidecar",
			change: func(p *corev1.PodSpec) {
				sidecar := *container(p).DeepCopy()
				sidecar.Name, sidecar.RestartPolicy = "sidecar", ptr.To(corev1.ContainerRestartPolicyAlways)
				p.InitContainers = []corev1.Container{sidecar}
			},
			rule: "spec.template.spec.initContainers[0].restartPolicy is not allowed"},
		{name: "an AppArmor annotation that unconfines the pod",
			job: func(j *batchv1.Job) {
				j.Spec.Template.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/copy": "unconfined"}
			},
			rule: "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/copy] is not allowed"},
		{name: "a label that selects the pod into another's Service",
			job:  func(j *batchv1.Job) { j.Spec.Template.Labels["app"] = "postgres" },
			rule: "spec.template.metadata.labels[app] is not allowed: a copy Job's pod carries only the labels"},
		{name: "another manager's label",
			job:  func(j *batchv1.Job) { j.Spec.Template.Labels["app.kubernetes.io/managed-by"] = "helm" },
			rule: "spec.template.metadata.labels[app.kubernetes.io/managed-by] is not allowed"},
		{name: "a thousand pods at once",
			job: func(j *batchv1.Job) {
				j.Spec.Parallelism, j.Spec.Completions = ptr.To[int32](1000), ptr.To[int32](1000)
			},
			rule: "spec.parallelism is not allowed here: a copy Job runs one pod to one completion"},
		{name: "several completions",
			job:  func(j *batchv1.Job) { j.Spec.Completions = ptr.To[int32](5) },
			rule: "spec.completions is not allowed here"},
		{name: "another controller managing the Job",
			job:  func(j *batchv1.Job) { j.Spec.ManagedBy = ptr.To("example.com/job-runner") },
			rule: "spec.managedBy must not be set: a copy Job sets only its template"},
	}
	t.Run("a Job that could reach the node is refused", func(t *testing.T) {
		for i, r := range refusals {
			job := s.copyJob(fmt.Sprintf("refused-%d", i), "copy")
			if r.namespace != "" {
				job.Namespace = r.namespace
			}
			if r.change != nil {
				r.change(&job.Spec.Template.Spec)
			}
			if r.job != nil {
				r.job(job)
			}
			wantPolicyRefusal(t, "a copy Job with "+r.name, s.operator.Create(ctx, job), jobsPolicy, r.rule)
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("a copy Job with %s: Job %s/%s exists after the refusal (%v)", r.name, job.Namespace, job.Name, err)
			}
		}
	})

	// A Job someone else made, which the operator's could not be: privileged.
	other := s.copyJob("someone-elses", "copy")
	other.Spec.Template.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	other.Spec.Template.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true)
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	t.Run("RBAC refuses changing a Job, and pods and other workloads", func(t *testing.T) {
		job := &batchv1.Job{}
		if err := s.operator.Get(ctx, client.ObjectKeyFromObject(other), job); err != nil {
			t.Fatal(err)
		}
		job.Labels["example.com/touched"] = "yes"
		wantRBACRefusal(t, "updating copy Job "+job.Name, s.operator.Update(ctx, job), "update", "jobs")
		for _, w := range s.workloads() {
			wantRBACRefusal(t, "creating "+w.what, s.operator.Create(ctx, w.obj), "create", w.resource)
		}
	})

	t.Run("with RBAC widened, the policy still refuses pods and other workloads", func(t *testing.T) {
		s.grant(t, []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "daemonsets"}, Verbs: []string{"create"}},
			{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"create"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"update"}},
		}, authorizationv1.ResourceAttributes{Namespace: s.vms, Verb: "create", Resource: "pods"})
		for _, w := range s.workloads() {
			wantPolicyRefusal(t, "creating "+w.what, s.operator.Create(ctx, w.obj), jobsPolicy,
				"the operator creates no pods, and no workloads but the copy Jobs of VMVolumeMigrations: refused CREATE of "+w.resource)
		}
		// An update is held to the same rules as a create: the operator may not touch a Job
		// it could not have made (resume a suspended one, say).
		job := &batchv1.Job{}
		if err := s.operator.Get(ctx, client.ObjectKeyFromObject(other), job); err != nil {
			t.Fatal(err)
		}
		job.Labels["example.com/touched"] = "yes"
		wantPolicyRefusal(t, "updating privileged Job "+job.Name, s.operator.Update(ctx, job), jobsPolicy,
			"spec.template.spec.containers[0].securityContext.privileged must not be true")
	})
}

// workload is a pod-making object the operator never creates.
type workload struct {
	what, resource string
	obj            client.Object
}

// workloads are a privileged pod, Deployment, DaemonSet and CronJob in the VM's namespace.
func (s *site) workloads() []workload {
	spec := corev1.PodSpec{
		HostPID: true,
		Containers: []corev1.Container{{Name: "shell", Image: "busybox:1.36", Command: []string{"sleep", "infinity"},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}},
	}
	labels := map[string]string{"app": "shell"}
	template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: s.vms, Name: name} }
	selector := &metav1.LabelSelector{MatchLabels: labels}
	jobTemplate := template.DeepCopy()
	jobTemplate.Spec.RestartPolicy = corev1.RestartPolicyNever
	return []workload{
		{"a privileged pod", "pods", &corev1.Pod{ObjectMeta: meta("shell"), Spec: spec}},
		{"a Deployment", "deployments", &appsv1.Deployment{ObjectMeta: meta("shell"), Spec: appsv1.DeploymentSpec{Selector: selector, Template: template}}},
		{"a DaemonSet", "daemonsets", &appsv1.DaemonSet{ObjectMeta: meta("shell"), Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template}}},
		{"a CronJob", "cronjobs", &batchv1.CronJob{ObjectMeta: meta("shell"), Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: *jobTemplate}}}}},
	}
}
