package site

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The pure parts of the site, without an API server.

func pods(phases ...corev1.PodPhase) jobPods {
	var list []*corev1.Pod
	for _, p := range phases {
		list = append(list, &corev1.Pod{Status: corev1.PodStatus{Phase: p}})
	}
	return countPods(list)
}

func conditionTypes(status batchv1.JobStatus) string {
	var types []string
	for _, c := range status.Conditions {
		types = append(types, string(c.Type)+"="+c.Reason)
	}
	return strings.Join(types, " ")
}

// TestJobStatusFollowsTheAPIServersRules checks the conditions against the transitions
// Kubernetes 1.34 validates: the interim condition first, the terminal one only with no pod
// left active, completionTime only with Complete.
func TestJobStatusFollowsTheAPIServersRules(t *testing.T) {
	start := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(start.Add(time.Minute))
	tests := []struct {
		name       string
		spec       batchv1.JobSpec
		pods       jobPods
		want       string
		completion bool
	}{
		{"running", batchv1.JobSpec{}, pods(corev1.PodRunning), "", false},
		{"succeeded", batchv1.JobSpec{}, pods(corev1.PodSucceeded),
			"SuccessCriteriaMet=CompletionsReached Complete=CompletionsReached", true},
		{"failed within the backoff limit", batchv1.JobSpec{BackoffLimit: ptr.To[int32](1)}, pods(corev1.PodFailed), "", false},
		{"failed past the backoff limit", batchv1.JobSpec{BackoffLimit: ptr.To[int32](1)}, pods(corev1.PodFailed, corev1.PodFailed),
			"FailureTarget=BackoffLimitExceeded Failed=BackoffLimitExceeded", false},
		{"deadline passed with a pod still active", batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](30)}, pods(corev1.PodRunning),
			"FailureTarget=DeadlineExceeded", false},
		{"deadline passed, pods gone", batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](30)}, pods(),
			"FailureTarget=DeadlineExceeded Failed=DeadlineExceeded", false},
		{"deadline not yet", batchv1.JobSpec{ActiveDeadlineSeconds: ptr.To[int64](300)}, pods(corev1.PodRunning), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{Spec: tt.spec, Status: batchv1.JobStatus{StartTime: &start}}
			status := jobStatus(job, tt.pods, judgeJob(job, tt.pods, start.Time, now.Time), start, now)
			if got := conditionTypes(status); got != tt.want {
				t.Errorf("conditions %q, want %q", got, tt.want)
			}
			if (status.CompletionTime != nil) != tt.completion {
				t.Errorf("completionTime %v", status.CompletionTime)
			}
			finished := jobCondition(&batchv1.Job{Status: status}, batchv1.JobComplete) != nil ||
				jobCondition(&batchv1.Job{Status: status}, batchv1.JobFailed) != nil
			if finished && status.Active != 0 {
				t.Errorf("a finished Job has %d active pods", status.Active)
			}
			if status.StartTime == nil || status.UncountedTerminatedPods == nil {
				t.Errorf("startTime %v, uncountedTerminatedPods %v", status.StartTime, status.UncountedTerminatedPods)
			}
		})
	}
}

func TestJobStatusKeepsItsFirstConditionsAndCounts(t *testing.T) {
	start := metav1.Now()
	job := &batchv1.Job{Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0)}, Status: batchv1.JobStatus{StartTime: &start}}
	running := pods(corev1.PodFailed, corev1.PodRunning)
	first := jobStatus(job, running, judgeJob(job, running, start.Time, start.Time), start, start)
	if got := conditionTypes(first); got != "FailureTarget=BackoffLimitExceeded" {
		t.Fatalf("conditions %q", got)
	}
	// The failed pod is gone from the list: the counter does not go down, the target stays.
	job.Status = first
	later := metav1.NewTime(start.Add(time.Second))
	gone := pods()
	second := jobStatus(job, gone, judgeJob(job, gone, start.Time, later.Time), start, later)
	if second.Failed != 1 || conditionTypes(second) != "FailureTarget=BackoffLimitExceeded Failed=BackoffLimitExceeded" ||
		!second.Conditions[0].LastTransitionTime.Equal(&start) {
		t.Errorf("status %+v", second)
	}
}

func TestVMStatus(t *testing.T) {
	vm := &virtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Generation: 3}, Spec: virtv1.VirtualMachineSpec{
		Template: &virtv1.VirtualMachineInstanceTemplateSpec{Spec: virtv1.VirtualMachineInstanceSpec{
			Volumes: []virtv1.Volume{{Name: "root", VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: "b"}}}},
		}},
	}}
	vmi := func(phase virtv1.VirtualMachineInstancePhase, ready corev1.ConditionStatus, claim string) *virtv1.VirtualMachineInstance {
		return &virtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annVMGeneration: "2"}},
			Spec: virtv1.VirtualMachineInstanceSpec{Volumes: []virtv1.Volume{{Name: "root",
				VolumeSource: virtv1.VolumeSource{DataVolume: &virtv1.DataVolumeSource{Name: claim}}}}},
			Status: virtv1.VirtualMachineInstanceStatus{Phase: phase,
				Conditions: []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceReady, Status: ready}}},
		}
	}
	tests := []struct {
		name     string
		vmi      *virtv1.VirtualMachineInstance
		strategy virtv1.VirtualMachineRunStrategy
		claims   vmClaims
		want     virtv1.VirtualMachinePrintableStatus
		ready    bool
		restart  bool
	}{
		{"halted", nil, virtv1.RunStrategyHalted, vmClaims{}, virtv1.VirtualMachineStatusStopped, false, false},
		{"claim missing", nil, virtv1.RunStrategyAlways, vmClaims{missing: []string{"b"}}, virtv1.VirtualMachineStatusPvcNotFound, false, false},
		{"waiting for binding", vmi(virtv1.Scheduling, corev1.ConditionFalse, "b"), virtv1.RunStrategyAlways, vmClaims{unbound: []string{"b"}},
			virtv1.VirtualMachineStatusWaitingForVolumeBinding, false, false},
		{"running", vmi(virtv1.Running, corev1.ConditionTrue, "b"), virtv1.RunStrategyAlways, vmClaims{}, virtv1.VirtualMachineStatusRunning, true, false},
		{"running on the old volume", vmi(virtv1.Running, corev1.ConditionTrue, "a"), virtv1.RunStrategyAlways, vmClaims{},
			virtv1.VirtualMachineStatusRunning, true, true},
		{"failed to start", vmi(virtv1.Failed, corev1.ConditionFalse, "b"), virtv1.RunStrategyAlways, vmClaims{},
			virtv1.VirtualMachineStatusCrashLoopBackOff, false, false},
		{"migrating", migratingVMI(vmi(virtv1.Running, corev1.ConditionTrue, "b")), virtv1.RunStrategyAlways, vmClaims{},
			virtv1.VirtualMachineStatusMigrating, true, false},
		{"unschedulable", unschedulableVMI(vmi(virtv1.Scheduling, corev1.ConditionFalse, "b")), virtv1.RunStrategyAlways, vmClaims{},
			virtv1.VirtualMachineStatusUnschedulable, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := vmStatus(vm, tt.vmi, tt.strategy, tt.claims, metav1.Now())
			if st.PrintableStatus != tt.want || st.Ready != tt.ready || st.Created != (tt.vmi != nil) || st.DesiredGeneration != 3 {
				t.Errorf("status %+v", st)
			}
			if tt.vmi != nil && st.ObservedGeneration != 2 {
				t.Errorf("observedGeneration %d, want the VMI's 2", st.ObservedGeneration)
			}
			restart := slices.ContainsFunc(st.Conditions, func(c virtv1.VirtualMachineCondition) bool {
				return c.Type == virtv1.VirtualMachineRestartRequired && c.Status == corev1.ConditionTrue
			})
			if restart != tt.restart {
				t.Errorf("RestartRequired %t, want %t", restart, tt.restart)
			}
		})
	}
}

func TestMapPaths(t *testing.T) {
	paths := map[string]string{"/dev/src": "/site/a.img", "/dev/dst": "/site/b.img"}
	got := mapPaths([]string{"copy", "--src", "/dev/src", "--dst=/dev/dst", "--other=/dev/srcx", "/dev/dst", "x=/dev/src"}, paths)
	want := []string{"copy", "--src", "/site/a.img", "--dst=/site/b.img", "--other=/dev/srcx", "/site/b.img", "x=/dev/src"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"copy", "--dst", "/dev/x"}, "/dev/x"},
		{[]string{"copy", "-dst=/dev/y"}, "/dev/y"},
		{[]string{"copy", "--dstx", "/dev/x"}, ""},
		{[]string{"copy", "--dst"}, ""},
	} {
		if got := flagValue(tt.args, "dst"); got != tt.want {
			t.Errorf("flagValue(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestContainerLogRendering(t *testing.T) {
	var file bytes.Buffer
	log := &criLog{w: &file}
	out, errs := log.stream("stdout"), log.stream("stderr")
	_, _ = out.Write([]byte("one\ntw"))
	_, _ = errs.Write([]byte("progress 1\n"))
	_, _ = out.Write([]byte("o\nthree"))
	out.flush()
	errs.flush()

	var pending []byte
	records := readRecords(bufio.NewReader(bytes.NewReader(file.Bytes())), &pending)
	render := func(records []logRecord, timestamps bool, limit int64) string {
		var b bytes.Buffer
		lw := &logWriter{w: &b, timestamps: timestamps, left: limit}
		for _, r := range records {
			if lw.write(r) != nil {
				break
			}
		}
		return b.String()
	}
	if got := render(records, false, -1); got != "one\nprogress 1\ntwo\nthree" {
		t.Errorf("all: %q", got)
	}
	if got := render(tail(records, 2), false, -1); got != "two\nthree" {
		t.Errorf("tail 2: %q", got)
	}
	if got := render(tail(records, 0), false, -1); got != "" {
		t.Errorf("tail 0: %q", got)
	}
	if got := render(records, false, 6); got != "one\npr" {
		t.Errorf("limit 6: %q", got)
	}
	stamped := render(tail(records, 1), true, -1)
	stamp, rest, _ := strings.Cut(stamped, " ")
	if _, err := time.Parse(time.RFC3339Nano, stamp); err != nil || rest != "three" {
		t.Errorf("timestamps: %q (%v)", stamped, err)
	}
	if len(pending) != 0 {
		t.Errorf("a complete file left %q pending", pending)
	}
	// A line still being written is left for the next read.
	pending = nil
	partial := append(bytes.Clone(file.Bytes()), []byte("2026-01-01T00:00:00Z stdout F fou")...)
	if got := readRecords(bufio.NewReader(bytes.NewReader(partial)), &pending); len(got) != len(records) || string(pending) != "2026-01-01T00:00:00Z stdout F fou" {
		t.Errorf("%d records, pending %q", len(got), pending)
	}
}

// sparseFile writes data at the given offsets of a file of size bytes that is a hole elsewhere.
func sparseFile(t testing.TB, path string, size int64, chunks map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, data := range chunks {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
}

func allocated(t testing.TB, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestCopySparseCopiesBytesAndKeepsHoles(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	a, b := make([]byte, 64<<10), make([]byte, 100)
	_, _ = rand.Read(a)
	_, _ = rand.Read(b)
	const size = 16 << 20
	sparseFile(t, src, size, map[int64][]byte{1 << 20: a, size - 100: b})
	if err := copySparse(src, dst, size+4096, false); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(src)
	got, _ := os.ReadFile(dst)
	if len(got) != size+4096 || !bytes.Equal(got[:size], want) || !bytes.Equal(got[size:], make([]byte, 4096)) {
		t.Fatalf("the copy (%d bytes) differs from the source (%d bytes, grown to %d)", len(got), len(want), size+4096)
	}
	if used, srcUsed := allocated(t, dst), allocated(t, src); used > 2*srcUsed {
		t.Errorf("the copy allocates %d bytes for the source's %d: holes were filled", used, srcUsed)
	}
	// An existing target is left alone: a retried reconcile copies nothing twice.
	if err := os.WriteFile(dst, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := copySparse(src, dst, size, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "kept" {
		t.Errorf("an existing target was rewritten")
	}
}

// BenchmarkCopySparse copies a 1 GiB volume with 1 MiB of data in every 10 MiB, the shape of
// the copy benchmark's sparse volume: a restore or clone of it must take well under a second.
func BenchmarkCopySparse(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	chunk := make([]byte, 1<<20)
	_, _ = rand.Read(chunk)
	chunks := map[int64][]byte{}
	for off := int64(0); off < 1<<30; off += 10 << 20 {
		chunks[off] = chunk
	}
	sparseFile(b, src, 1<<30, chunks)
	b.SetBytes(1 << 30)
	for b.Loop() {
		dst := filepath.Join(dir, "dst")
		if err := copySparse(src, dst, 1<<30, false); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		_ = os.Remove(dst)
		b.StartTimer()
	}
}

func TestLiveMigratable(t *testing.T) {
	claim := func(name string) virtv1.Volume {
		return virtv1.Volume{Name: name, VolumeSource: virtv1.VolumeSource{PersistentVolumeClaim: &virtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-pvc"}}}}
	}
	info := func(name string, modes ...corev1.PersistentVolumeAccessMode) virtv1.VolumeStatus {
		return virtv1.VolumeStatus{Name: name, PersistentVolumeClaimInfo: &virtv1.PersistentVolumeClaimInfo{AccessModes: modes}}
	}
	containerDisk := virtv1.Volume{Name: "boot", VolumeSource: virtv1.VolumeSource{ContainerDisk: &virtv1.ContainerDiskSource{Image: "x"}}}
	hostDisk := virtv1.Volume{Name: "host", VolumeSource: virtv1.VolumeSource{HostDisk: &virtv1.HostDisk{Path: "/x"}}}
	const shared = ", live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
	tests := []struct {
		name    string
		volumes []virtv1.Volume
		status  []virtv1.VolumeStatus
		message string // "" for migratable
		block   bool
	}{
		{"shared claims", []virtv1.Volume{claim("a"), claim("b")},
			[]virtv1.VolumeStatus{info("a", corev1.ReadWriteMany), info("b", corev1.ReadWriteOnce, corev1.ReadWriteMany)}, "", false},
		{"a claim not shared", []virtv1.Volume{claim("a"), claim("b")},
			[]virtv1.VolumeStatus{info("a", corev1.ReadWriteMany), info("b", corev1.ReadWriteOnce)}, "cannot migrate VMI: PVC b-pvc is not shared" + shared, true},
		{"a claim not reported", []virtv1.Volume{claim("a")}, nil, "cannot migrate VMI: Unable to determine if PVC a-pvc is shared" + shared, true},
		{"a container disk is copied", []virtv1.Volume{containerDisk, claim("a")}, []virtv1.VolumeStatus{info("a", corev1.ReadWriteMany)}, "", true},
		{"a host disk not shared", []virtv1.Volume{hostDisk}, nil, "cannot migrate VMI with non-shared HostDisk", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := &virtv1.VirtualMachineInstance{Spec: virtv1.VirtualMachineInstanceSpec{Volumes: tt.volumes}, Status: virtv1.VirtualMachineInstanceStatus{VolumeStatus: tt.status}}
			c, block := liveMigratable(vmi)
			want := condition{status: corev1.ConditionTrue}
			if tt.message != "" {
				want = condition{status: corev1.ConditionFalse, reason: "DisksNotLiveMigratable", message: tt.message}
			}
			if c != want || block != tt.block {
				t.Errorf("got %+v block %t, want %+v block %t", c, block, want, tt.block)
			}
		})
	}
}

func TestNodeUnfit(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	node := func(mod func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"zone": "a"}}, Status: *ready.DeepCopy()}
		if mod != nil {
			mod(n)
		}
		return n
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}
	tolerates := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	tests := []struct {
		name        string
		node        *corev1.Node
		selector    map[string]string
		tolerations []corev1.Toleration
		want        string
	}{
		{"fits", node(nil), map[string]string{"zone": "a"}, nil, ""},
		{"label differs", node(nil), map[string]string{"zone": "b"}, nil, unfitSelector},
		{"label missing", node(nil), map[string]string{"rack": "1"}, nil, unfitSelector},
		{"cordoned", node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), nil, nil, unfitCordoned},
		{"tainted", node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{dedicated} }), nil, nil, unfitTaint},
		{"taint tolerated", node(func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{dedicated} }), nil, tolerates, ""},
		{"PreferNoSchedule is no bar", node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}}
		}), nil, nil, ""},
		{"not ready", node(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }), nil, nil, unfitNotReady},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nodeUnfit(tt.node, tt.selector, tt.tolerations); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMigrationTargetSelectorKeepsTheVMIs(t *testing.T) {
	got := mergeSelectors(map[string]string{corev1.LabelHostname: "a", "zone": "1"}, map[string]string{corev1.LabelHostname: "b", "rack": "2"})
	want := map[string]string{corev1.LabelHostname: "a", "zone": "1", "rack": "2"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := mergeSelectors(nil, nil); got == nil || len(got) != 0 {
		t.Errorf("no selectors: %v", got)
	}
}

func TestCompleteNodes(t *testing.T) {
	tests := []struct {
		opts      Options
		node      string
		nodes     []string
		wantError bool
	}{
		{Options{}, DefaultNodeName, []string{DefaultNodeName}, false},
		{Options{NodeName: "a"}, "a", []string{"a"}, false},
		{Options{Nodes: []string{"a", "b"}}, "a", []string{"a", "b"}, false},
		{Options{NodeName: "b", Nodes: []string{"a", "b"}}, "b", []string{"a", "b"}, false},
		{Options{NodeName: "c", Nodes: []string{"a", "b"}}, "", nil, true},
		{Options{Nodes: []string{"a", "a"}}, "", nil, true},
		{Options{Nodes: []string{"a", ""}}, "", nil, true},
	}
	for _, tt := range tests {
		opts := tt.opts
		err := completeNodes(&opts)
		if (err != nil) != tt.wantError || err == nil && (opts.NodeName != tt.node || !slices.Equal(opts.Nodes, tt.nodes)) {
			t.Errorf("%+v: NodeName %q, Nodes %q, error %v", tt.opts, opts.NodeName, opts.Nodes, err)
		}
	}
}

// migratingVMI is vmi with a live migration started and not ended.
func migratingVMI(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	vmi.Status.MigrationState = &virtv1.VirtualMachineInstanceMigrationState{StartTimestamp: ptr.To(metav1.Now())}
	return vmi
}

// unschedulableVMI is vmi with no node to take it.
func unschedulableVMI(vmi *virtv1.VirtualMachineInstance) *virtv1.VirtualMachineInstance {
	vmi.Status.Conditions = append(vmi.Status.Conditions, virtv1.VirtualMachineInstanceCondition{
		Type: vmiPodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available."})
	return vmi
}
