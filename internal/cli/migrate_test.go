package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// Without the operator's webhooks the API server stores what the plugin sends: the flags
// become the spec, and nothing is defaulted.
func TestMigrateCreatesTheMigration(t *testing.T) {
	ns := env.Namespace(t)
	r := plugin(t, runOpts{}, "migrate", "web", "root", "--to", "linstor-rwx", "-n", ns, "--name", "move-web",
		"--hot", "--size", "20Gi", "--access-mode", "RWO", "--snapshot-class", "linstor-snap")
	r.wantCode(t, ExitOK)
	if want := "vmvolumemigration/move-web created: VM web volume root to class linstor-rwx, Hot, 20Gi, ReadWriteOnce\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	m := &nwv1.VMVolumeMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "move-web"}, m); err != nil {
		t.Fatal(err)
	}
	s := m.Spec
	if s.VMName != "web" || s.VolumeName != "root" || s.Mode != nwv1.MigrationHot || s.Target.StorageClassName != "linstor-rwx" ||
		s.Target.Size.Cmp(resource.MustParse("20Gi")) != 0 || s.Target.AccessMode != corev1.ReadWriteOnce || s.SnapshotClassName != "linstor-snap" {
		t.Errorf("spec %+v", s)
	}

	// Without --name: VM-VOLUME- and five random characters; without --hot the mode is left
	// to the webhook (the CRD defaults the access mode).
	r = plugin(t, runOpts{}, "migrate", "web", "data", "--to", "linstor-rwx", "-n", ns)
	r.wantCode(t, ExitOK)
	name := regexp.MustCompile(`^vmvolumemigration/(web-data-[a-z0-9]{5}) created: VM web volume data to class linstor-rwx, Cold, ReadWriteMany\n$`).FindStringSubmatch(r.stdout)
	if name == nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name[1]}, m); err != nil || m.Spec.Mode != "" {
		t.Fatalf("%s: %v, mode %q", name[1], err, m.Spec.Mode)
	}

	// A VM named like a subcommand.
	plugin(t, runOpts{}, "migrate", "--vm", "list", "root", "--to", "linstor-rwx", "-n", ns, "--name", "vm-called-list").wantCode(t, ExitOK)
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "vm-called-list"}, m); err != nil || m.Spec.VMName != "list" {
		t.Fatalf("%v, vmName %q", err, m.Spec.VMName)
	}

	// -o table is the line, as without -o; text is another name for it.
	for _, format := range []string{"table", "text"} {
		r = plugin(t, runOpts{}, "migrate", "web", "root", "--to", "linstor-rwx", "-n", ns, "--name", "move-web-"+format, "-o", format)
		r.wantCode(t, ExitOK)
		if want := "vmvolumemigration/move-web-" + format + " created: VM web volume root to class linstor-rwx, Cold, ReadWriteMany\n"; r.stdout != want {
			t.Errorf("-o %s: stdout %q, want %q", format, r.stdout, want)
		}
	}

	// -o json prints the object the API server returned.
	r = plugin(t, runOpts{}, "migrate", "db", "root", "--to", "linstor-rwx", "-n", ns, "--name", "move-db", "-o", "json")
	r.wantCode(t, ExitOK)
	var printed nwv1.VMVolumeMigration
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil || printed.Kind != "VMVolumeMigration" || printed.UID == "" || printed.ManagedFields != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
}

func TestMigrateUsageErrors(t *testing.T) {
	ns := env.Namespace(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "web", "root"}, "Error: --to CLASS is required"},
		{[]string{"migrate", "web"}, "Error: kubectl nodewright migrate wants VM VOLUME"},
		{[]string{"migrate", "web", "root", "--to", "c", "--size", "lots"}, `Error: --size "lots": quantities must match`},
		{[]string{"migrate", "web", "root", "--to", "c", "--size", "0"}, `Error: --size "0": must be greater than zero`},
		{[]string{"migrate", "web", "root", "--to", "c", "--access-mode", "ReadOnlyMany"}, `Error: --access-mode "ReadOnlyMany": want ReadWriteMany (RWX) or ReadWriteOnce (RWO)`},
		{[]string{"migrate", "web", "root", "--to", "c", "--name", "Not_A_Name"}, `Error: --name "Not_A_Name": a lowercase RFC 1123 subdomain`},
		{[]string{"migrate", "web", "root", "--to", "c", "--timeout", "5m"}, "Error: --timeout needs --wait"},
		{[]string{"migrate", "web", "root", "--to", "c", "--wait", "-o", "json"}, "Error: --wait writes the migration's progress; it cannot be combined with --output json"},
		{[]string{"migrate", "web", "root", "--to", "c", "--bogus"}, "Error: unknown flag: --bogus"},
		{[]string{"migrate", "watch"}, "Error: kubectl nodewright migrate watch wants the NAME of a VMVolumeMigration, got 0 arguments"},
		{[]string{"migrate", "list", "extra"}, `Error: unknown command "extra" for "kubectl nodewright migrate list"`},
	} {
		r := plugin(t, runOpts{}, append(c.args, "-n", ns)...)
		r.wantCode(t, ExitUsage)
		if !strings.HasPrefix(r.stderr, c.want) || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%v: stderr %q, want it to start with %q and point at --help", c.args, r.stderr, c.want)
		}
	}
	var list nwv1.VMVolumeMigrationList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
		t.Fatalf("a usage error created something: %v %v", err, list.Items)
	}
}

// The API server's own refusal (the CRD schema) is shown field by field, prefixed by the
// object, with exit code 1.
func TestMigrateSchemaRefusal(t *testing.T) {
	ns := env.Namespace(t)
	r := plugin(t, runOpts{}, "migrate", "web", "root", "--to", "linstor-rwx", "-n", ns, "--name", "too-long",
		"--snapshot-class", strings.Repeat("s", 254))
	r.wantCode(t, ExitFailed)
	if want := "Error: vmvolumemigration/too-long: spec.snapshotClassName: Too long: may not be more than 253 bytes\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// createMigrations stores migrations with statuses, as the operator would have written them.
func createMigration(t *testing.T, ns, name, vm string, mode nwv1.MigrationMode, status nwv1.VMVolumeMigrationStatus) *nwv1.VMVolumeMigration {
	t.Helper()
	ctx := context.Background()
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.VMVolumeMigrationSpec{VMName: vm, VolumeName: "root", Mode: mode, Target: nwv1.MigrationTarget{StorageClassName: "linstor-rwx"}}}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	if status.Phase != "" {
		m.Status = status
		if err := env.Client.Status().Update(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestMigrateList(t *testing.T) {
	ns := env.Namespace(t)
	now := metav1.Now()
	createMigration(t, ns, "move-web", "web", nwv1.MigrationCold, nwv1.VMVolumeMigrationStatus{
		WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning, StartTime: &now, Steps: []nwv1.WorkflowStep{
			{Name: "Validate", State: nwv1.StepSucceeded}, {Name: "Copy", State: nwv1.StepRunning, StartedAt: &now}, {Name: "Repoint", State: nwv1.StepPending},
		}},
		Progress: &nwv1.MigrationProgress{BytesDone: 42, BytesTotal: 100, Percent: 42},
	})
	createMigration(t, ns, "move-db", "db", nwv1.MigrationHot, nwv1.VMVolumeMigrationStatus{
		WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRolledBack, StartTime: &now, CompletionTime: &now},
	})
	createMigration(t, ns, "pending", "vm3", "", nwv1.VMVolumeMigrationStatus{})

	r := plugin(t, runOpts{}, "migrate", "list", "-n", ns)
	r.wantCode(t, ExitOK)
	age := regexp.MustCompile(`(?m)   \d+s$`)
	want := `NAME       VM    VOLUME   MODE   PHASE        STEP   PROGRESS   AGE
move-db    db    root     Hot    RolledBack   -      -          AGE
move-web   web   root     Cold   Running      Copy   42%        AGE
pending    vm3   root     -      Pending      -      -          AGE
`
	if got := age.ReplaceAllString(r.stdout, "   AGE"); got != want {
		t.Errorf("migrate list:\n%s\nwant:\n%s", got, want)
	}

	// Every namespace: the namespace comes first.
	r = plugin(t, runOpts{}, "migrate", "list", "-A")
	r.wantCode(t, ExitOK)
	if !regexp.MustCompile(`(?m)^NAMESPACE +NAME +VM`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^`+ns+` +move-web +web +root +Cold +Running +Copy +42%`).MatchString(r.stdout) {
		t.Errorf("migrate list -A:\n%s", r.stdout)
	}

	r = plugin(t, runOpts{}, "migrate", "list", "-n", ns, "-o", "json")
	r.wantCode(t, ExitOK)
	var list nwv1.VMVolumeMigrationList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if list.Kind != "VMVolumeMigrationList" || len(list.Items) != 3 || list.Items[1].Name != "move-web" || list.Items[1].Kind != "VMVolumeMigration" ||
		list.Items[1].Status.Progress.Percent != 42 || list.Items[1].ManagedFields != nil {
		t.Errorf("-o json: %s", r.stdout)
	}
	r = plugin(t, runOpts{}, "migrate", "list", "-n", ns, "-o", "yaml")
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stdout, "kind: VMVolumeMigrationList\n") || !strings.Contains(r.stdout, "- apiVersion: nodewright.spectrocloud.com/v1alpha1\n") {
		t.Errorf("-o yaml:\n%s", r.stdout)
	}

	// None: nothing on standard output, a note on standard error, exit code 0.
	empty := env.Namespace(t)
	r = plugin(t, runOpts{}, "migrate", "list", "-n", empty)
	r.wantCode(t, ExitOK)
	if r.stdout != "" || r.stderr != "No VMVolumeMigrations found in namespace "+empty+".\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

// replay creates the migration of a recorded sequence in ns and, once the watch has shown it,
// writes each later snapshot's status through the status subresource, as the operator did.
// The test waits for the returned channel before it ends.
func replay(t *testing.T, ns string, snaps []migrationSnapshot, shown func(), edit func(*nwv1.VMVolumeMigrationStatus)) <-chan struct{} {
	t.Helper()
	ctx := context.Background()
	first := snaps[0].Migration
	m := &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first.Name}, Spec: first.Spec}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		shown()
		for i, s := range snaps[1:] {
			m.Status = *s.Migration.Status.DeepCopy()
			if i == len(snaps)-2 && edit != nil {
				edit(&m.Status)
			}
			if err := env.Client.Status().Update(ctx, m); err != nil {
				t.Errorf("writing snapshot %d: %v", i+2, err)
				return
			}
		}
	}()
	return done
}

// waitForOutput returns once out says text, or after two minutes: a limit only a stuck
// command reaches, even on a busy machine.
func waitForOutput(out *testenv.SyncBuffer, text string) {
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), text) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

var timestamps = regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ `)

// migrate watch, driven by the API server's watch as the recorded statuses are written,
// writes exactly the log of the golden file (times aside), and --wait gives the outcome's
// exit code.
func TestMigrateWatchFollowsTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		sequence string
		args     []string
		edit     func(*nwv1.VMVolumeMigrationStatus)
		code     int
	}{
		{"watch-cold-succeeded", []string{"--wait"}, nil, ExitOK},
		{"watch-hot-rolledback", []string{"--wait"}, nil, ExitFailed},
		{"watch-hot-rolledback", nil, nil, ExitOK}, // without --wait, ending is all that counts
		{"watch-hot-rolledback", []string{"--wait"}, func(s *nwv1.VMVolumeMigrationStatus) { s.Phase = nwv1.WorkflowFailed }, ExitFailed},
	} {
		t.Run(c.sequence+strings.Join(c.args, ""), func(t *testing.T) {
			ns := env.Namespace(t)
			snaps := loadSnapshots(t, c.sequence)
			out := &testenv.SyncBuffer{}
			replayed := replay(t, ns, snaps, func() { waitForOutput(out, "phase Pending") }, c.edit)
			r := plugin(t, runOpts{stdout: out}, append([]string{"migrate", "watch", snaps[0].Migration.Name, "-n", ns}, c.args...)...)
			<-replayed
			r.wantCode(t, c.code)
			want, err := os.ReadFile(filepath.Join("testdata", c.sequence+".lines.golden"))
			if err != nil {
				t.Fatal(err)
			}
			expected := strings.ReplaceAll(timestamps.ReplaceAllString(string(want), "T "), "apps/", ns+"/")
			if c.edit != nil {
				expected = strings.ReplaceAll(expected, "phase RolledBack", "phase Failed")
				expected = strings.ReplaceAll(expected, "Result: RolledBack", "Result: Failed")
			}
			if got := timestamps.ReplaceAllString(r.stdout, "T "); got != expected {
				t.Errorf("watch log:\n%s\nwant:\n%s", got, expected)
			}
			if r.stderr != "" {
				t.Errorf("stderr %q", r.stderr)
			}
		})
	}
}

func TestMigrateWaitEndsEarly(t *testing.T) {
	ns := env.Namespace(t)
	createMigration(t, ns, "slow", "web", nwv1.MigrationCold, nwv1.VMVolumeMigrationStatus{})

	// --timeout: exit code 3, saying where it stood.
	r := plugin(t, runOpts{}, "migrate", "watch", "slow", "-n", ns, "--wait", "--timeout", "1s")
	r.wantCode(t, ExitNotFinished)
	if want := "Error: timed out after 1s waiting for vmvolumemigration/slow: phase Pending\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Interrupted (Ctrl-C): 3 too.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "phase Pending")
		cancel()
	}()
	r = plugin(t, runOpts{ctx: ctx, stdout: out}, "migrate", "watch", "slow", "-n", ns, "--wait")
	r.wantCode(t, ExitNotFinished)
	if want := "Error: interrupted waiting for vmvolumemigration/slow: phase Pending\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Deleted while waited on: 1.
	out = &testenv.SyncBuffer{}
	go func() {
		waitForOutput(out, "phase Pending")
		_ = env.Client.Delete(context.Background(), &nwv1.VMVolumeMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "slow"}})
	}()
	r = plugin(t, runOpts{stdout: out}, "migrate", "watch", "slow", "-n", ns, "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: vmvolumemigration/slow was deleted before it finished (phase Pending)\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}

	// Not there at all: 1 at once.
	r = plugin(t, runOpts{}, "migrate", "watch", "nope", "-n", ns, "--wait")
	r.wantCode(t, ExitFailed)
	if want := "Error: vmvolumemigration/nope not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// migrate --wait creates the migration and follows it like migrate watch --wait.
func TestMigrateWait(t *testing.T) {
	ns := env.Namespace(t)
	snaps := loadSnapshots(t, "watch-cold-succeeded")
	out := &testenv.SyncBuffer{}
	written := make(chan struct{})
	go func() {
		defer close(written)
		ctx := context.Background()
		waitForOutput(out, "phase Pending")
		m := &nwv1.VMVolumeMigration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "move-web"}, m); err != nil {
			t.Error(err)
			return
		}
		m.Status = *snaps[len(snaps)-1].Migration.Status.DeepCopy()
		if err := env.Client.Status().Update(ctx, m); err != nil {
			t.Error(err)
		}
	}()
	r := plugin(t, runOpts{stdout: out}, "migrate", "web", "root", "--to", "linstor-rwx", "-n", ns, "--name", "move-web", "--wait", "--timeout", "1m")
	<-written
	r.wantCode(t, ExitOK)
	for _, want := range []string{"vmvolumemigration/move-web created: ", "phase Succeeded\n", "Result: Succeeded after 2m13s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout does not say %q:\n%s", want, r.stdout)
		}
	}
}

// flakyWatches ends every watch after its first event, and answers the watch numbered
// expireOn with "resource version too old", as an API server that compacted its history does.
type flakyWatches struct {
	client.WithWatch
	expireOn int

	mu      sync.Mutex
	watches int
}

func (f *flakyWatches) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	f.mu.Lock()
	f.watches++
	n := f.watches
	f.mu.Unlock()
	ch := make(chan watch.Event, 1)
	proxy := watch.NewProxyWatcher(ch)
	if n == f.expireOn {
		status := apierrors.NewResourceExpired("too old resource version").Status()
		ch <- watch.Event{Type: watch.Error, Object: &status}
		close(ch)
		return proxy, nil
	}
	inner, err := f.WithWatch.Watch(ctx, list, opts...)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(ch)
		defer inner.Stop()
		select {
		case ev, ok := <-inner.ResultChan():
			if ok {
				select {
				case ch <- ev:
				case <-proxy.StopChan():
				}
			}
		case <-proxy.StopChan():
		}
	}()
	return proxy, nil
}

// A watch the API server ends is resumed from the last version seen: no status is missed or
// shown twice. One whose version expired is read afresh.
func TestWatchResumes(t *testing.T) {
	defer func(d time.Duration) { rewatchDelay = d }(rewatchDelay)
	rewatchDelay = 10 * time.Millisecond
	for _, expireOn := range []int{0, 3} {
		t.Run(fmt.Sprintf("expire-on-%d", expireOn), func(t *testing.T) {
			ns := env.Namespace(t)
			snaps := loadSnapshots(t, "watch-cold-succeeded")
			cfg := rest.CopyConfig(env.Config)
			c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
			if err != nil {
				t.Fatal(err)
			}
			flaky := &flakyWatches{WithWatch: c, expireOn: expireOn}
			out := &testenv.SyncBuffer{}
			f := &Factory{streams: genericiooptions.IOStreams{Out: out, ErrOut: &testenv.SyncBuffer{}}, Now: time.Now,
				IsTerminal: func(any) bool { return false }, Getenv: func(string) string { return "" }}
			replayed := replay(t, ns, snaps, func() { waitForOutput(out, "phase Pending") }, nil)
			err = watchMigration(context.Background(), f, flaky, ns, snaps[0].Migration.Name, waitOptions{wait: true})
			<-replayed
			if err != nil {
				t.Fatalf("watch: %v\n%s", err, out.String())
			}
			got := timestamps.ReplaceAllString(out.String(), "T ")
			if expireOn == 0 {
				want, _ := os.ReadFile(filepath.Join("testdata", "watch-cold-succeeded.lines.golden"))
				if expected := strings.ReplaceAll(timestamps.ReplaceAllString(string(want), "T "), "apps/", ns+"/"); got != expected {
					t.Errorf("watch log through %d watches:\n%s\nwant:\n%s", flaky.watches, got, expected)
				}
				if flaky.watches < len(snaps)-1 {
					t.Errorf("%d watches for %d updates: the watches did not end", flaky.watches, len(snaps)-1)
				}
				return
			}
			// Read afresh, it may have moved on by several versions: the end is what counts.
			if !strings.HasSuffix(got, "Result: Succeeded after 2m13s: every step finished; VM web runs on web-root-to-rwx-target\n") ||
				strings.Count(got, "phase Succeeded") != 1 {
				t.Errorf("watch log after an expired version:\n%s", got)
			}
		})
	}
}

// Started in the middle of a copy, the live view takes no rate from the first read: the value
// it shows was written some time before it arrived. The first update the watch delivers shows
// the bytes without a rate; the second gives one.
func TestMigrateWatchMidCopyRate(t *testing.T) {
	ns := env.Namespace(t)
	const mib = 1 << 20
	started := metav1.Now()
	copying := func(done int64) nwv1.VMVolumeMigrationStatus {
		return nwv1.VMVolumeMigrationStatus{
			WorkflowStatus: nwv1.WorkflowStatus{Phase: nwv1.WorkflowRunning, StartTime: &started, Steps: []nwv1.WorkflowStep{
				{Name: "Copy", State: nwv1.StepRunning, StartedAt: &started},
			}},
			Progress: &nwv1.MigrationProgress{BytesDone: done, BytesTotal: 10240 * mib, Percent: int32(done * 100 / (10240 * mib))},
		}
	}
	m := createMigration(t, ns, "mid-copy", "web", nwv1.MigrationCold, copying(1000*mib))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &testenv.SyncBuffer{}
	done := make(chan invocation, 1)
	go func() {
		done <- plugin(t, runOpts{ctx: ctx, stdout: out, terminal: true}, "migrate", "watch", "mid-copy", "-n", ns)
	}()
	// lastLine is the newest progress line showing text.
	lastLine := func(text string) string {
		s := out.String()
		i := strings.LastIndex(s, text)
		if i < 0 {
			t.Fatalf("the view never showed %q:\n%q", text, s)
		}
		line, _, _ := strings.Cut(s[i:], "\n")
		return line
	}
	update := func(done int64) {
		t.Helper()
		m.Status = copying(done)
		if err := env.Client.Status().Update(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}

	waitForOutput(out, "1000.0 MiB / 10.0 GiB")
	if l := lastLine("1000.0 MiB / 10.0 GiB"); !strings.Contains(l, "ETA -") || strings.Contains(l, "/s") {
		t.Errorf("the first read: %q, want no rate", l)
	}
	update(1100 * mib)
	waitForOutput(out, "1.1 GiB / 10.0 GiB")
	if l := lastLine("1.1 GiB / 10.0 GiB"); !strings.Contains(l, "ETA -") || strings.Contains(l, "/s") {
		t.Errorf("the first update after the read: %q, want no rate (the read is no reference)", l)
	}
	update(1200 * mib)
	waitForOutput(out, "1.2 GiB / 10.0 GiB")
	if l := lastLine("1.2 GiB / 10.0 GiB"); !strings.Contains(l, "/s  ETA ") {
		t.Errorf("the second update: %q, want a rate and an ETA", l)
	}
	cancel()
	r := <-done
	r.wantCode(t, ExitNotFinished)
}
