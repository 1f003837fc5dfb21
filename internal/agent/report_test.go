package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// reportedNode is a node whose agent reports from a played bond, real drbdsetup answers and a
// Kairos tree; the object is removed when the test ends.
func reportedNode(t *testing.T, node string) (*agent.Reporter, *playedBond, *drbdsetupAnswers) {
	t.Helper()
	bond, answers := activeBackup(), &drbdsetupAnswers{sample: connectedSample}
	r := &agent.Reporter{Client: env.LiteClient(t), Node: node, Observer: &agent.HostObserver{
		Bond: bond, BondName: "bond0", DRBD: answers, ProcDRBD: loadedDRBD(t), OS: hostos.Kairos{}, Host: kairosHost(t)}}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})
	return r, bond, answers
}

func getStatus(t *testing.T, node string) *nwv1.NodewrightAgentStatus {
	t.Helper()
	as := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
		t.Fatal(err)
	}
	return as
}

// report runs one report and says whether the object changed in the API server (its
// resourceVersion moved): the writes are counted by their effect, not by the calls made.
func report(t *testing.T, r *agent.Reporter) (as *nwv1.NodewrightAgentStatus, wrote bool) {
	t.Helper()
	before := &nwv1.NodewrightAgentStatus{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Name: r.Node}, before)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := r.Report(context.Background()); err != nil {
		t.Fatalf("Report: %v", err)
	}
	as = getStatus(t, r.Node)
	return as, as.ResourceVersion != before.ResourceVersion
}

func TestTheReporterWritesOnlyWhatChanged(t *testing.T) {
	const node = "report-edge-1"
	r, bond, answers := reportedNode(t, node)

	// The first report creates the object and says everything.
	as, wrote := report(t, r)
	if !wrote {
		t.Fatal("the first report wrote nothing")
	}
	st := as.Status
	if st.Reporter != nwv1.ReporterAgent || st.Storage == nil || st.Storage.Resources != 1 || len(st.Storage.ResourceStatuses) != 1 ||
		st.Network.BondMode != nwv1.BondModeActiveBackup || st.Network.Bond == nil || len(st.Network.Bond.Members) != 2 ||
		st.OS == nil || st.OS.Kairos == nil || st.OS.Kairos.BootEntry != nwv1.KairosBootPassive || st.OS.PrettyName != "Ubuntu 24.04.1 LTS" {
		t.Fatalf("the first report: %+v", st)
	}
	for typ, want := range map[string]metav1.ConditionStatus{nwv1.ConditionStorageHealthy: metav1.ConditionTrue, nwv1.ConditionHostObserved: metav1.ConditionTrue} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != want {
			t.Errorf("%s: %+v; want %s", typ, c, want)
		}
	}
	// The status subresource's fields are the agent's, applied.
	if owners := statusManagers(as); len(owners) != 1 || owners[0] != agent.FieldManager+"/Apply" {
		t.Errorf("the status is managed by %v; want only %s/Apply", owners, agent.FieldManager)
	}

	// Nothing changed on the host: nothing is written, however often it reports.
	for i := range 3 {
		if _, wrote := report(t, r); wrote {
			t.Fatalf("report %d with nothing changed wrote the object", i+2)
		}
	}
	healthySince := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy).LastTransitionTime

	// A resync starts: written once, then nothing again.
	answers.set(syncSourceSample)
	as, wrote = report(t, r)
	v := as.Status.Storage.ResourceStatuses[0].Peers[0].Volumes[0]
	if !wrote || v.ReplicationState != "SyncSource" || v.ResyncDonePercent == nil || *v.ResyncDonePercent != 0 || as.Status.Storage.OutOfSyncKiB != 409600 {
		t.Fatalf("a resync: wrote %v, %+v", wrote, as.Status.Storage)
	}
	if c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy); c.Status != metav1.ConditionFalse || c.Reason != nwv1.ReasonDRBDDegraded {
		t.Errorf("StorageHealthy during a resync: %+v", c)
	}
	if _, wrote := report(t, r); wrote {
		t.Error("the same resync state was written twice")
	}

	// A member link goes down.
	bond.setMember("eth2", false)
	as, wrote = report(t, r)
	if !wrote || as.Status.Network.Bond.Members[1].Up {
		t.Fatalf("a link down: wrote %v, %+v", wrote, as.Status.Network.Bond)
	}

	// Back in sync: the condition's transition time is the time of this change.
	answers.set(connectedSample)
	as, _ = report(t, r)
	c := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionStorageHealthy)
	if c.Status != metav1.ConditionTrue || c.LastTransitionTime.Before(&healthySince) {
		t.Errorf("healthy again: %+v (first healthy at %s)", c, healthySince)
	}
	// HostObserved never changed: its transition time is the first one.
	if h := meta.FindStatusCondition(as.Status.Conditions, nwv1.ConditionHostObserved); h.LastTransitionTime.After(healthySince.Add(time.Second)) {
		t.Errorf("HostObserved moved its transition time without changing: %+v", h)
	}

	// A restarted agent with nothing changed on the host writes nothing either.
	again := &agent.Reporter{Client: env.LiteClient(t), Node: node, Observer: r.Observer}
	if _, wrote := report(t, again); wrote {
		t.Error("a restarted agent rewrote an unchanged status")
	}
}

// statusManagers lists the managers of status fields, as manager/operation.
func statusManagers(as *nwv1.NodewrightAgentStatus) []string {
	var out []string
	for _, m := range as.ManagedFields {
		if m.Subresource == "status" {
			out = append(out, fmt.Sprintf("%s/%s", m.Manager, m.Operation))
		}
	}
	return out
}

// TestTheReporterRestoresWhatOthersChanged: its fields are its own; one changed or removed by
// another writer, or the object deleted, is written again at the next report.
func TestTheReporterRestoresWhatOthersChanged(t *testing.T) {
	const node = "report-edge-2"
	r, _, _ := reportedNode(t, node)
	report(t, r)

	// Someone applies another OS with force, taking the field.
	other := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": nwv1.GroupVersion.String(), "kind": "NodewrightAgentStatus", "metadata": map[string]any{"name": node},
		"status": map[string]any{"os": map[string]any{"name": "Something else"}},
	}}
	if err := env.Client.Status().Patch(context.Background(), other, client.Apply, client.FieldOwner("someone"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	as, wrote := report(t, r)
	if !wrote || as.Status.OS == nil || as.Status.OS.Name != "Ubuntu" {
		t.Fatalf("after another writer: wrote %v, os %+v", wrote, as.Status.OS)
	}
	if _, wrote := report(t, r); wrote {
		t.Error("written again once restored")
	}

	// Deleted: made again.
	if err := env.Client.Delete(context.Background(), as); err != nil {
		t.Fatal(err)
	}
	as, _ = report(t, r)
	if as.Status.Reporter != nwv1.ReporterAgent || as.Status.OS == nil {
		t.Fatalf("after a deletion: %+v", as.Status)
	}
}

// TestTheReporterRuns: run as the agent runs it, it reads the host at every interval and
// writes nothing while nothing changes, and a trigger makes it report at once.
func TestTheReporterRuns(t *testing.T) {
	const node = "report-edge-3"
	r, bond, _ := reportedNode(t, node)
	r.Interval = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var first *nwv1.NodewrightAgentStatus
	testenv.Eventually(t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		if as.Status.Reporter != nwv1.ReporterAgent {
			return "not reported yet"
		}
		first = as
		return ""
	})
	// Twenty more reads of the host, and the object is as it was.
	reads := bond.readCount()
	testenv.Eventually(t, patience, func() string {
		if n := bond.readCount(); n < reads+20 {
			return fmt.Sprintf("%d reads of the host since the first report", n-reads)
		}
		return ""
	})
	if as := getStatus(t, node); as.ResourceVersion != first.ResourceVersion {
		t.Errorf("written while nothing changed: resourceVersion %s, then %s", first.ResourceVersion, as.ResourceVersion)
	}
	bond.setMember("eth1", false)
	testenv.Eventually(t, patience, func() string {
		if as := getStatus(t, node); as.Status.Network.Bond == nil || as.Status.Network.Bond.Members[0].Up {
			return "eth1 still reported up"
		}
		return ""
	})
}

// TestATriggerReportsAtOnce: with an interval far away, a trigger (an operation finished)
// makes the agent read the host now.
func TestATriggerReportsAtOnce(t *testing.T) {
	const node = "report-edge-4"
	r, bond, _ := reportedNode(t, node)
	r.Interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, patience, func() string {
		if bond.readCount() == 0 {
			return "the first report has not read the bond"
		}
		return ""
	})
	bond.setMember("eth2", false)
	r.Trigger()
	testenv.Eventually(t, patience, func() string {
		as := &nwv1.NodewrightAgentStatus{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: node}, as); err != nil {
			return err.Error()
		}
		if as.Status.Network.Bond == nil || as.Status.Network.Bond.Members[1].Up {
			return "eth2 still reported up"
		}
		return ""
	})
}

// bondChanger is an operation that changes the played bond, as a bond change would.
type bondChanger struct{ bond *playedBond }

func (b bondChanger) Run(context.Context, *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	b.bond.setMember("eth1", false)
	return &nwv1.NodeOperationResult{}, nil
}

func (bondChanger) Resumable() bool { return false }

// TestAFinishedOperationIsReportedAtOnce: the agent as cmd/agent wires it, the runner telling
// the reporter when an operation is recorded: what the operation changed on the host is in the
// status without waiting for the (here hour-long) interval.
func TestAFinishedOperationIsReportedAtOnce(t *testing.T) {
	const node = "report-edge-5"
	ns := env.Namespace(t)
	r, bond, _ := reportedNode(t, node)
	r.Interval = time.Hour
	run(t, r.Run)
	runOperations(t, &agent.Operations{Client: r.Client, Node: node, Namespace: ns, Recorded: r.Trigger,
		Executors: map[nwv1.NodeOperationType]agent.Executor{nwv1.OperationDRBDVerify: bondChanger{bond}}})
	testenv.Eventually(t, patience, func() string {
		if as := getStatusOrNil(node); as == nil || as.Status.Network.Bond == nil || !as.Status.Network.Bond.Members[0].Up {
			return "the first report, with eth1 up, is not there"
		}
		return ""
	})
	op := operation(ns, "change", node, time.Now().Add(time.Hour))
	create(t, op)
	phaseOf(t, op, nwv1.OperationSucceeded)
	testenv.Eventually(t, patience, func() string {
		if as := getStatusOrNil(node); as == nil || as.Status.Network.Bond == nil || as.Status.Network.Bond.Members[0].Up {
			return "eth1 still reported up after the operation"
		}
		return ""
	})
}

func getStatusOrNil(node string) *nwv1.NodewrightAgentStatus {
	as := &nwv1.NodewrightAgentStatus{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: node}, as); err != nil {
		return nil
	}
	return as
}

// TestAReportRequestIsAnsweredAtOnce: a report request on the node's object is answered at
// once (the interval is an hour), by a report read after it, even when nothing changed; and one
// too long is never answered.
func TestAReportRequestIsAnsweredAtOnce(t *testing.T) {
	const node = "report-edge-9"
	r, bond, _ := reportedNode(t, node)
	r.Interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- r.Run(ctx) }()
	go func() { done <- r.FollowRequests(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	testenv.Eventually(t, patience, func() string {
		if getStatusOrNil(node) == nil || bond.readCount() == 0 {
			return "the first report is not written"
		}
		return ""
	})
	ask := func(request string) (reads int) {
		t.Helper()
		reads = bond.readCount()
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nwv1.AnnotationReportRequest, request)
		if err := env.Client.Patch(ctx, &nwv1.NodewrightAgentStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
		return reads
	}
	for _, request := range []string{"uid-1", "uid-2"} {
		before := ask(request)
		testenv.Eventually(t, patience, func() string {
			if got := getStatus(t, node).Status.ReportRequest; got != request {
				return fmt.Sprintf("status.reportRequest %q, want %q", got, request)
			}
			return ""
		})
		if bond.readCount() <= before {
			t.Errorf("request %s was answered without reading the host", request)
		}
	}
	// A request too long is never answered: a report made while it stands answers none.
	ask(strings.Repeat("x", nwv1.MaxReportRequest+1))
	if err := r.Report(ctx); err != nil {
		t.Fatal(err)
	}
	if got := getStatus(t, node).Status.ReportRequest; got != "" {
		t.Errorf("with a request too long standing, status.reportRequest %q, want none", got)
	}
}
