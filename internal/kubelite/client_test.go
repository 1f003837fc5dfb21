package kubelite_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New()

// TestMain starts the control plane, except in a fuzzing worker: it runs only the fuzz
// targets, which need none, and one control plane per worker would be a dozen.
func TestMain(m *testing.M) {
	flag.Parse()
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		os.Exit(m.Run())
	}
	os.Exit(env.Run(m))
}

// patience bounds every wait: only a stuck test reaches it.
const patience = 2 * time.Minute

var (
	operations    = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "nodeoperations"}
	agentStatuses = kubelite.Resource{Group: nwv1.GroupVersion.Group, Version: nwv1.GroupVersion.Version, Resource: "nodewrightagentstatuses"}
	configMaps    = kubelite.Resource{Version: "v1", Resource: "configmaps"}
)

func operation(ns, name, node string) *nwv1.NodeOperation {
	return &nwv1.NodeOperation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: nwv1.NodeOperationSpec{NodeName: node, Type: nwv1.OperationDRBDVerify, Deadline: metav1.NewTime(time.Now().Add(time.Hour)),
			DRBDVerify: &nwv1.DRBDResourceOperation{Resource: "pvc-1"}}}
}

// create creates obj with the administrator's controller-runtime client and returns its
// resourceVersion.
func create(t *testing.T, obj client.Object) string {
	t.Helper()
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	return obj.GetResourceVersion()
}

func TestGetCreateUpdateAndTheirErrors(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	c := env.LiteClient(t)
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, configMaps.Path(ns, "settings"), cm)
	if !kubelite.IsNotFound(err) || kubelite.IsConflict(err) || err.Error() != `configmaps "settings" not found` {
		t.Fatalf("reading what is not there: %v; want NotFound with the server's message", err)
	}
	if kubelite.IgnoreNotFound(err) != nil {
		t.Error("IgnoreNotFound kept a NotFound")
	}
	want := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "1"}}
	if err := c.Create(ctx, configMaps.Path(ns, ""), want, cm); err != nil {
		t.Fatal(err)
	}
	if cm.UID == "" || cm.Namespace != ns || cm.Data["a"] != "1" {
		t.Errorf("created %+v", cm)
	}
	err = c.Create(ctx, configMaps.Path(ns, ""), want, nil)
	if !kubelite.IsAlreadyExists(err) || kubelite.IsConflict(err) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("creating it again: %v; want AlreadyExists", err)
	}
	stale := cm.DeepCopy()
	cm.Data["a"] = "2"
	updated := &corev1.ConfigMap{}
	if err := c.Update(ctx, configMaps.Path(ns, "settings"), cm, updated); err != nil {
		t.Fatal(err)
	}
	if updated.Data["a"] != "2" || updated.ResourceVersion == stale.ResourceVersion {
		t.Errorf("updated %+v", updated)
	}
	stale.Data["a"] = "3"
	err = c.Update(ctx, configMaps.Path(ns, "settings"), stale, nil)
	if !kubelite.IsConflict(err) || !strings.Contains(err.Error(), "the object has been modified") {
		t.Errorf("an update from a stale read: %v; want Conflict", err)
	}
	err = c.Create(ctx, configMaps.Path(ns, ""), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "Not_A_Name"}}, nil)
	var se *kubelite.StatusError
	if !errors.As(err, &se) || se.Code != 422 || se.Reason != "Invalid" || !strings.Contains(se.Message, "Not_A_Name") {
		t.Errorf("an invalid name: %#v; want 422 Invalid naming it", err)
	}
}

// TestAStaleStatusWriteConflicts: a merge patch of the status carrying the resourceVersion
// read is refused once the operation changed, and written when it did not; the patch holds
// only what changed.
func TestAStaleStatusWriteConflicts(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	c := env.LiteClient(t)
	create(t, operation(ns, "op", "edge-1"))
	read := &nwv1.NodeOperation{}
	if err := c.Get(ctx, operations.Path(ns, "op"), read); err != nil {
		t.Fatal(err)
	}
	// Someone else writes the status meanwhile.
	other := read.DeepCopy()
	other.Status.Phase = nwv1.OperationRunning
	if err := env.Client.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	mine := read.DeepCopy()
	mine.Status.Phase, mine.Status.Error = nwv1.OperationFailed, &nwv1.OperationError{Reason: "X", Message: "y"}
	patch, err := kubelite.MergePatch(read, mine, read.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"metadata":{"resourceVersion":"` + read.ResourceVersion + `"},"status":{"error":{"message":"y","reason":"X"},"phase":"Failed"}}`; string(patch) != want {
		t.Errorf("the patch %s; want %s", patch, want)
	}
	err = c.MergePatch(ctx, operations.Path(ns, "op", "status"), patch, nil)
	if !kubelite.IsConflict(err) {
		t.Fatalf("a status write from a stale read: %v; want Conflict", err)
	}
	got := &nwv1.NodeOperation{}
	if err := c.Get(ctx, operations.Path(ns, "op"), got); err != nil || got.Status.Phase != nwv1.OperationRunning {
		t.Fatalf("after the refused write: %v %+v", err, got.Status)
	}
	// From a fresh read it is written, and the error cleared by a null.
	fresh := got.DeepCopy()
	fresh.Status.Phase, fresh.Status.Error = nwv1.OperationFailed, &nwv1.OperationError{Reason: "X", Message: "y"}
	patch, _ = kubelite.MergePatch(got, fresh, got.ResourceVersion)
	written := &nwv1.NodeOperation{}
	if err := c.MergePatch(ctx, operations.Path(ns, "op", "status"), patch, written); err != nil {
		t.Fatal(err)
	}
	cleared := written.DeepCopy()
	cleared.Status.Error = nil
	patch, _ = kubelite.MergePatch(written, cleared, written.ResourceVersion)
	if err := c.MergePatch(ctx, operations.Path(ns, "op", "status"), patch, written); err != nil {
		t.Fatal(err)
	}
	if written.Status.Phase != nwv1.OperationFailed || written.Status.Error != nil {
		t.Errorf("after the writes: %+v", written.Status)
	}
}

// TestApplyOwnsItsFields: a server-side apply of the status, as the agent makes it, is
// recorded under its field manager on the status subresource; forced, it takes a field from
// another manager, and leaves that manager's other fields alone.
func TestApplyOwnsItsFields(t *testing.T) {
	ctx := context.Background()
	c := env.LiteClient(t)
	const node = "apply-edge-1"
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	created := &nwv1.NodewrightAgentStatus{TypeMeta: metav1.TypeMeta{APIVersion: nwv1.GroupVersion.String(), Kind: "NodewrightAgentStatus"},
		ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := c.Create(ctx, agentStatuses.Path("", ""), created, nil); err != nil {
		t.Fatal(err)
	}
	apply := func(manager string, force bool, status map[string]any) error {
		obj := map[string]any{"apiVersion": nwv1.GroupVersion.String(), "kind": "NodewrightAgentStatus", "metadata": map[string]any{"name": node}, "status": status}
		return c.Apply(ctx, agentStatuses.Path("", node, "status"), obj, manager, force, nil)
	}
	if err := apply("bridge", false, map[string]any{"role": string(nwv1.NodeRolePrimary), "reporter": "Legacy"}); err != nil {
		t.Fatal(err)
	}
	err := apply("nodewright-agent", false, map[string]any{"reporter": "Agent"})
	if !kubelite.IsConflict(err) || !strings.Contains(err.Error(), "conflict with \"bridge\"") {
		t.Fatalf("applying a field another manager holds, unforced: %v; want a Conflict naming it", err)
	}
	if err := apply("nodewright-agent", true, map[string]any{"reporter": "Agent"}); err != nil {
		t.Fatal(err)
	}
	got := &nwv1.NodewrightAgentStatus{}
	if err := c.Get(ctx, agentStatuses.Path("", node), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Reporter != nwv1.ReporterAgent || got.Status.Role != nwv1.NodeRolePrimary {
		t.Errorf("status %+v; want the agent's reporter and the bridge's role", got.Status)
	}
	owners := map[string]string{}
	for _, m := range got.ManagedFields {
		if m.Subresource == "status" && m.Operation == metav1.ManagedFieldsOperationApply {
			owners[m.Manager] = string(m.FieldsV1.Raw)
		}
	}
	if !strings.Contains(owners["nodewright-agent"], "f:reporter") || strings.Contains(owners["nodewright-agent"], "f:role") ||
		!strings.Contains(owners["bridge"], "f:role") || strings.Contains(owners["bridge"], "f:reporter") {
		t.Errorf("the status's owners: %v; want reporter the agent's, role the bridge's", owners)
	}
}

// events collects what a ListWatch hands on.
type events struct {
	mu   sync.Mutex
	seen []string // type/name
}

func (e *events) handle(ev kubelite.Event) {
	m, err := kubelite.MetaOf(ev.Object)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.seen = append(e.seen, "undecodable")
		return
	}
	e.seen = append(e.seen, ev.Type+"/"+m.Name)
}

func (e *events) count(what string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.seen {
		if s == what {
			n++
		}
	}
	return n
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// follow runs lw until the test ends.
func follow(t *testing.T, lw *kubelite.ListWatch) *events {
	t.Helper()
	ev := &events{}
	lw.Handle = ev.handle
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = lw.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ev
}

func waitFor(t *testing.T, ev *events, what string) {
	t.Helper()
	testenv.Eventually(t, patience, func() string {
		if ev.count(what) == 0 {
			return fmt.Sprintf("no %s among %v", what, ev.all())
		}
		return ""
	})
}

// TestListWatchSelectsItsNode: listed and watched with spec.nodeName=edge-1, the operations
// of edge-2 never arrive, those of edge-1 do, as listed and as changed.
func TestListWatchSelectsItsNode(t *testing.T) {
	ns := env.Namespace(t)
	create(t, operation(ns, "before-mine", "edge-1"))
	create(t, operation(ns, "before-theirs", "edge-2"))
	c := env.LiteClient(t)
	ev := follow(t, &kubelite.ListWatch{Client: c, Path: operations.Path(ns, ""), Options: kubelite.ListOptions{FieldSelector: "spec.nodeName=edge-1"}})
	waitFor(t, ev, kubelite.Listed+"/before-mine")
	create(t, operation(ns, "theirs", "edge-2"))
	mine := operation(ns, "mine", "edge-1")
	create(t, mine)
	waitFor(t, ev, kubelite.Added+"/mine")
	mine.Status.Phase = nwv1.OperationRunning
	if err := env.Client.Status().Update(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ev, kubelite.Modified+"/mine")
	if err := env.Client.Delete(context.Background(), mine); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ev, kubelite.Deleted+"/mine")
	// The events arrive in order: edge-2's, written before, would be there by now.
	for _, e := range ev.all() {
		if strings.HasSuffix(e, "/theirs") || strings.HasSuffix(e, "/before-theirs") {
			t.Errorf("edge-2's operation arrived: %v", ev.all())
		}
	}
}

// TestListWatchTakesUpAClosedWatch: the API server ends each watch after a second; the
// ListWatch watches again from the last resourceVersion, without listing again, and each
// operation created meanwhile arrives exactly once.
func TestListWatchTakesUpAClosedWatch(t *testing.T) {
	ns := env.Namespace(t)
	c := env.LiteClient(t)
	lw := &kubelite.ListWatch{Client: c, Path: operations.Path(ns, ""), Options: kubelite.ListOptions{FieldSelector: "spec.nodeName=edge-1"},
		WatchTimeout: time.Second}
	ev := follow(t, lw)
	testenv.Eventually(t, patience, func() string {
		if lw.ResourceVersion() == "" {
			return "not listed yet"
		}
		return ""
	})
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("op-%d", i)
		names = append(names, name)
		_, before := lw.Requests()
		create(t, operation(ns, name, "edge-1"))
		waitFor(t, ev, kubelite.Added+"/"+name)
		// The next one is created in another watch, once the server ended this one.
		testenv.Eventually(t, patience, func() string {
			if _, watches := lw.Requests(); watches <= before {
				return "the watch has not been taken up again"
			}
			return ""
		})
	}
	if lists, watches := lw.Requests(); lists != 1 || watches < 4 {
		t.Errorf("%d lists and %d watches; want one list, then watches taken up again", lists, watches)
	}
	for _, name := range names {
		if n := ev.count(kubelite.Added + "/" + name); n != 1 {
			t.Errorf("%s arrived %d times: %v", name, n, ev.all())
		}
	}
}

// TestListWatchFollowsBookmarks: a bookmark (which the server sends before a watch ends)
// moves the resourceVersion the next watch starts from past a change the selector hides,
// which never arrives.
func TestListWatchFollowsBookmarks(t *testing.T) {
	ns := env.Namespace(t)
	lw := &kubelite.ListWatch{Client: env.LiteClient(t), Path: operations.Path(ns, ""), Options: kubelite.ListOptions{FieldSelector: "spec.nodeName=edge-1"},
		WatchTimeout: 5 * time.Second}
	ev := follow(t, lw)
	testenv.Eventually(t, patience, func() string {
		if lw.ResourceVersion() == "" {
			return "not listed yet"
		}
		return ""
	})
	hidden := create(t, operation(ns, "hidden", "edge-2"))
	testenv.Eventually(t, patience, func() string {
		got, _ := strconv.ParseUint(lw.ResourceVersion(), 10, 64)
		want, _ := strconv.ParseUint(hidden, 10, 64)
		if got < want {
			return fmt.Sprintf("the watch goes on from %d, before %d", got, want)
		}
		return ""
	})
	if all := ev.all(); len(all) != 0 {
		t.Errorf("events arrived: %v; want none", all)
	}
}

// TestListWatchListsAgainWhenGone: a watch from a resourceVersion the server no longer has
// (410 Gone: here one far older than its window) makes the ListWatch list again, and go on
// watching from the new list.
func TestListWatchListsAgainWhenGone(t *testing.T) {
	ns := env.Namespace(t)
	create(t, operation(ns, "there", "edge-1"))
	lw := &kubelite.ListWatch{Client: env.LiteClient(t), Path: operations.Path(ns, ""), Options: kubelite.ListOptions{FieldSelector: "spec.nodeName=edge-1"}}
	lw.StartAt("1")
	ev := follow(t, lw)
	waitFor(t, ev, kubelite.Listed+"/there")
	create(t, operation(ns, "after", "edge-1"))
	waitFor(t, ev, kubelite.Added+"/after")
	if lists, _ := lw.Requests(); lists != 1 {
		t.Errorf("%d lists; want one, after the watch from resourceVersion 1 was refused", lists)
	}
}

// TestWatchFromAnExpiredVersionIsGone: the server's refusal reaches the caller as a Gone
// error, with its message.
func TestWatchFromAnExpiredVersionIsGone(t *testing.T) {
	ns := env.Namespace(t)
	w, err := env.LiteClient(t).Watch(context.Background(), operations.Path(ns, ""), kubelite.ListOptions{ResourceVersion: "1"})
	if err == nil {
		defer func() { _ = w.Close() }()
		_, err = w.Next()
	}
	if !kubelite.IsGone(err) || !strings.Contains(err.Error(), "too old resource version") {
		t.Errorf("a watch from resourceVersion 1: %v; want Gone", err)
	}
}
