package site

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// copyCommand is the one command the site's kubelet runs.
const copyCommand = "nodewright-copy"

// errCannotRun is a pod the site cannot run at all; the pod fails with the reason.
var errCannotRun = errors.New("the site cannot run this pod")

// runPlan is how the kubelet runs a pod's container: the real binary on the host files.
type runPlan struct {
	container string
	args      []string // after the binary
	dir       string   // the pod's folder
	logPath   string
	termPath  string
	hold      <-chan struct{}
	// faultTarget, when set, is made one block long before the run (the FailCopy fault).
	faultTarget string
}

// plan resolves the pod's container into a command on the site's files. waiting says what the
// pod waits for (a claim to exist or be bound); errCannotRun wraps what the site cannot do.
func (k *kubelet) plan(ctx context.Context, pod *corev1.Pod) (plan *runPlan, waiting string, err error) {
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) > 0 {
		return nil, "", fmt.Errorf("%w: it runs pods of exactly one container", errCannotRun)
	}
	c := pod.Spec.Containers[0]
	if len(c.Command) == 0 || filepath.Base(c.Command[0]) != copyCommand {
		return nil, "", fmt.Errorf("%w: container %q runs %q; the site runs only %s", errCannotRun, c.Name, c.Command, copyCommand)
	}
	dir := k.s.files.pod(string(pod.UID))
	plan = &runPlan{
		container: c.Name,
		dir:       dir,
		logPath:   filepath.Join(dir, c.Name+".log"),
		termPath:  filepath.Join(dir, c.Name+".termination-log"),
	}
	paths := map[string]string{} // container path -> host path
	for _, vm := range c.VolumeMounts {
		if v := podVolume(pod, vm.Name); v != nil && v.PersistentVolumeClaim != nil {
			return nil, "", fmt.Errorf("%w: volume %q is mounted as a file system; the site has block volumes only", errCannotRun, vm.Name)
		}
	}
	for _, vd := range c.VolumeDevices {
		v := podVolume(pod, vd.Name)
		if v == nil || v.PersistentVolumeClaim == nil {
			return nil, "", fmt.Errorf("%w: volume device %q is not a persistentVolumeClaim volume", errCannotRun, vd.Name)
		}
		claim := v.PersistentVolumeClaim.ClaimName
		path, _, err := k.s.claimFile(ctx, pod.Namespace, claim)
		if err != nil {
			return nil, "", err
		}
		if path == "" {
			return nil, fmt.Sprintf("persistentvolumeclaim %q is missing, not bound, or not on the site's volumes", claim), nil
		}
		paths[vd.DevicePath] = path
	}
	job, err := k.jobOf(ctx, pod)
	if err != nil {
		return nil, "", err
	}
	args := append(append([]string{}, c.Command[1:]...), c.Args...)
	if job != nil && k.s.opts.FailCopy != nil && k.s.opts.FailCopy(job) {
		if dst := flagValue(args, "dst"); dst != "" {
			plan.faultTarget = filepath.Join(dir, failTarget)
			paths[dst] = plan.faultTarget
		}
	}
	msgPath := c.TerminationMessagePath
	if msgPath == "" {
		msgPath = corev1.TerminationMessagePathDefault
	}
	paths[msgPath] = plan.termPath
	plan.args = mapPaths(args, paths)
	if flagValue(args, "termination-log") == "" {
		plan.args = append(plan.args, "--termination-log="+plan.termPath)
	}
	if job != nil && k.s.opts.HoldCopy != nil {
		plan.hold = k.s.opts.HoldCopy(job)
	}
	return plan, "", nil
}

// failTarget is the file the FailCopy fault gives nodewright-copy as its target: one block,
// smaller than any volume.
const failTarget = "fail-copy-target.img"

func podVolume(pod *corev1.Pod, name string) *corev1.Volume {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == name {
			return &pod.Spec.Volumes[i]
		}
	}
	return nil
}

// mapPaths replaces container paths by host paths, as whole arguments or as the value of a
// --flag=value argument.
func mapPaths(args []string, paths map[string]string) []string {
	out := make([]string, len(args))
	for i, arg := range args {
		out[i] = arg
		if host, ok := paths[arg]; ok {
			out[i] = host
		} else if flag, value, ok := strings.Cut(arg, "="); ok && strings.HasPrefix(flag, "-") {
			if host, ok := paths[value]; ok {
				out[i] = flag + "=" + host
			}
		}
	}
	return out
}

// flagValue finds the value of a Go flag (-name or --name, as "--name value" or
// "--name=value") in args; "" when absent.
func flagValue(args []string, name string) string {
	for i, arg := range args {
		flag, value, hasValue := strings.Cut(arg, "=")
		if strings.TrimLeft(flag, "-") != name || !strings.HasPrefix(flag, "-") {
			continue
		}
		if hasValue {
			return value
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// jobOf returns the Job that controls the pod, or nil.
func (k *kubelet) jobOf(ctx context.Context, pod *corev1.Pod) (*batchv1.Job, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "Job" || owner.APIVersion != batchv1.SchemeGroupVersion.String() {
		return nil, nil
	}
	job := &batchv1.Job{}
	if err := k.s.client.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: owner.Name}, job); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	if job.UID != owner.UID {
		return nil, nil
	}
	return job, nil
}
