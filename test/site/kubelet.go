package site

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// stopGrace is how long the site waits, when it stops, for nodewright-copy to end on SIGTERM.
const stopGrace = 5 * time.Second

// kubelet runs the pods bound to the site's node: each one's container is a nodewright-copy
// process on the backing files of its volume devices.
type kubelet struct {
	s        *Site
	exits    chan event.GenericEvent // a container ended: reconcile its pod
	stopping chan struct{}           // closed when the site stops
	wg       sync.WaitGroup          // containers and folder removals

	mu    sync.Mutex
	procs map[types.UID]*container           // until the pod is gone
	ran   map[types.NamespacedName]types.UID // pods that have a folder
}

// container is one run of a pod's container.
type container struct {
	started  metav1.Time
	stop     chan struct{} // closed to stop it, after grace is set
	grace    time.Duration
	stopOnce sync.Once
	done     chan struct{} // closed once exit is set
	exit     containerExit
}

// containerExit is how a container ended.
type containerExit struct {
	code     int32
	reason   string
	message  string
	finished metav1.Time
}

func (c *container) requestStop(grace time.Duration) {
	c.stopOnce.Do(func() {
		c.grace = grace
		close(c.stop)
	})
}

func (c *container) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func newKubelet(s *Site) *kubelet {
	return &kubelet{
		s:        s,
		exits:    make(chan event.GenericEvent, 64),
		stopping: make(chan struct{}),
		procs:    map[types.UID]*container{},
		ran:      map[types.NamespacedName]types.UID{},
	}
}

func (k *kubelet) setup() error {
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.(*corev1.Pod).Spec.NodeName == k.s.opts.NodeName && k.s.inScope(o.GetNamespace())
	})
	inScope := predicate.NewPredicateFuncs(func(o client.Object) bool { return k.s.inScope(o.GetNamespace()) })
	return ctrl.NewControllerManagedBy(k.s.mgr).
		Named("site-kubelet").
		For(&corev1.Pod{}, builder.WithPredicates(onNode)).
		// A pod waits for its claims to be bound.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(k.podsOfClaim), builder.WithPredicates(inScope)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(k.s.viaVolume(k.podsOfClaim))).
		WatchesRawSource(source.Channel(k.exits, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(reconcile.Func(k.reconcile))
}

func (k *kubelet) podsOfClaim(ctx context.Context, o client.Object) []reconcile.Request {
	pods := &corev1.PodList{}
	if err := k.s.client.List(ctx, pods, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var names []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != k.s.opts.NodeName || podFinished(pod) {
			continue
		}
		for _, claim := range podClaims(pod) {
			if claim == o.GetName() {
				names = append(names, pod.Name)
			}
		}
	}
	return requests(o.GetNamespace(), names)
}

func (k *kubelet) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := k.s.client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			k.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if pod.Spec.NodeName != k.s.opts.NodeName {
		return ctrl.Result{}, nil
	}
	k.mu.Lock()
	c := k.procs[pod.UID]
	if _, err := os.Stat(k.s.files.pod(string(pod.UID))); err == nil {
		k.ran[req.NamespacedName] = pod.UID // a folder an earlier site made: removed with the pod
	}
	k.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		return ctrl.Result{}, k.terminate(ctx, pod, c)
	}
	if c == nil {
		if podFinished(pod) {
			return ctrl.Result{}, nil
		}
		if pod.Status.Phase == corev1.PodRunning {
			return ctrl.Result{}, k.writeStatus(ctx, pod, lostStatus(pod))
		}
		plan, waiting, err := k.plan(ctx, pod)
		switch {
		case errors.Is(err, errCannotRun):
			return ctrl.Result{}, k.writeStatus(ctx, pod, cannotRunStatus(pod, err))
		case err != nil:
			return ctrl.Result{}, err
		case waiting != "":
			return ctrl.Result{}, k.writeStatus(ctx, pod, waitingStatus(pod, waiting))
		}
		if c, err = k.start(pod, plan); err != nil {
			return ctrl.Result{}, err
		}
	}
	if c.finished() {
		return ctrl.Result{}, k.writeStatus(ctx, pod, terminatedStatus(pod, c))
	}
	return ctrl.Result{}, k.writeStatus(ctx, pod, runningStatus(pod, c))
}

// terminate is the kubelet's side of a pod's graceful deletion: stop the container, then
// confirm the deletion.
func (k *kubelet) terminate(ctx context.Context, pod *corev1.Pod, c *container) error {
	if c != nil {
		grace := time.Duration(0)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		c.requestStop(grace)
		if !c.finished() {
			return nil // woken again when it exits
		}
	}
	if err := ignoreGone(k.s.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})); err != nil {
		return fmt.Errorf("confirming the deletion of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	k.forget(client.ObjectKeyFromObject(pod))
	return nil
}

// forget drops a pod that is gone: its container is stopped and its folder removed.
func (k *kubelet) forget(key types.NamespacedName) {
	k.mu.Lock()
	uid, ok := k.ran[key]
	c := k.procs[uid]
	delete(k.ran, key)
	delete(k.procs, uid)
	k.mu.Unlock()
	if !ok {
		return
	}
	dir := k.s.files.pod(string(uid))
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		if c != nil {
			c.requestStop(0)
			<-c.done
		}
		if err := removeAll(dir); err != nil {
			k.s.opts.Logger.Error(err, "Removing a pod's folder", "folder", dir)
		}
	}()
}

// start prepares the pod's folder and runs its container.
func (k *kubelet) start(pod *corev1.Pod, plan *runPlan) (*container, error) {
	if err := os.MkdirAll(plan.dir, 0o755); err != nil {
		return nil, err
	}
	// nodewright-copy writes its result only into a termination log that exists.
	if err := os.WriteFile(plan.termPath, nil, 0o644); err != nil {
		return nil, err
	}
	if plan.faultTarget != "" {
		if err := os.WriteFile(plan.faultTarget, make([]byte, 4096), 0o600); err != nil {
			return nil, err
		}
	}
	logFile, err := os.OpenFile(plan.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := &container{started: metav1.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	k.mu.Lock()
	k.procs[pod.UID] = c
	k.ran[client.ObjectKeyFromObject(pod)] = pod.UID
	k.mu.Unlock()
	// The goroutine keeps only copies: the caller goes on using pod.
	policy := pod.Spec.Containers[0].TerminationMessagePolicy
	stub := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		c.exit = k.run(c, plan, logFile, policy)
		close(c.done)
		select {
		case k.exits <- event.GenericEvent{Object: stub}:
		case <-k.stopping:
		}
	}()
	return c, nil
}

// run runs nodewright-copy to its end, or until it is stopped.
func (k *kubelet) run(c *container, plan *runPlan, logFile *os.File, policy corev1.TerminationMessagePolicy) containerExit {
	defer func() { _ = logFile.Close() }()
	if plan.hold != nil {
		select {
		case <-plan.hold:
		case <-c.stop:
			return containerExit{code: 137, reason: "Error", message: "stopped before nodewright-copy started", finished: metav1.Now()}
		}
	}
	log := &criLog{w: logFile}
	stdout, stderr := log.stream("stdout"), log.stream("stderr")
	cmd := exec.Command(k.s.opts.CopyBinary, plan.args...)
	cmd.Dir = plan.dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return containerExit{code: 128, reason: "StartError", message: err.Error(), finished: metav1.Now()}
	}
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is read from ProcessState
		close(waited)
	}()
	select {
	case <-waited:
	case <-c.stop:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		timer := time.NewTimer(c.grace)
		select {
		case <-waited:
		case <-timer.C:
			_ = cmd.Process.Kill()
			<-waited
		}
		timer.Stop()
	}
	stdout.flush()
	stderr.flush()
	code := exitCode(cmd.ProcessState)
	exit := containerExit{code: code, reason: "Completed", finished: metav1.Now()}
	if code != 0 {
		exit.reason = "Error"
	}
	exit.message = terminationMessage(plan, code, policy)
	return exit
}

// exitCode is what a container runtime reports: the exit status, or 128 plus the signal.
func exitCode(state *os.ProcessState) int32 {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal())
	}
	return int32(state.ExitCode())
}

// maxTerminationMessage is the kubelet's limit on one container's termination message.
const maxTerminationMessage = 4096

// terminationMessage reads the termination log like the kubelet; with FallbackToLogsOnError a
// failed container with an empty one gets the tail of its log.
func terminationMessage(plan *runPlan, code int32, policy corev1.TerminationMessagePolicy) string {
	data, err := os.ReadFile(plan.termPath)
	if err != nil {
		return ""
	}
	if len(data) > maxTerminationMessage {
		data = data[:maxTerminationMessage]
	}
	if len(data) == 0 && code != 0 && policy == corev1.TerminationMessageFallbackToLogsOnError {
		return tailOfLog(plan.logPath, 80, 2048)
	}
	return string(data)
}

// sweep removes the folders of pods that are gone, left by an earlier site on the same Dir.
func (k *kubelet) sweep(ctx context.Context) error {
	entries, err := os.ReadDir(k.s.files.pods())
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := k.s.client.List(ctx, pods); err != nil {
		return err
	}
	live := map[string]bool{}
	for _, pod := range pods.Items {
		live[string(pod.UID)] = true
	}
	var errs []error
	for _, e := range entries {
		if !live[e.Name()] {
			errs = append(errs, removeAll(k.s.files.pod(e.Name())))
		}
	}
	return errors.Join(errs...)
}

// stopAll stops every container and waits for them, when the site stops.
func (k *kubelet) stopAll() {
	close(k.stopping)
	k.mu.Lock()
	for _, c := range k.procs {
		c.requestStop(stopGrace)
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// running says whether the pod's container is still to finish, for following its log.
func (k *kubelet) running(uid types.UID) bool {
	k.mu.Lock()
	c := k.procs[uid]
	k.mu.Unlock()
	return c != nil && !c.finished()
}
