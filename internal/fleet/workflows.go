package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// What the hub holds of a member's workflows is bounded, whatever the member holds: a
// member may have any number of BondModeFlipPlans and ReplicationUpgrades, each as large as
// its API server takes, and the hub caches none of them. It watches their metadata only to
// learn that something changed (each event is dropped once seen), then lists them a page at
// a time and keeps, of each page, only the unfinished ones the summary shows, summarised, and
// a count.
const (
	// maxWorkflows is how many workflows a summary lists (its workflows' MaxItems).
	maxWorkflows = 32
	// workflowPageSize is how many workflows one read of a member holds at a time: at most
	// 25 objects of the size the member's API server allows (etcd's 1.5 MiB each by default).
	workflowPageSize = 25
	// minWorkflowRead is the least time between two reads of one member's workflows; a read
	// that took longer waits as long again, so that a member whose workflows never stop
	// changing takes at most half of one goroutine's time.
	minWorkflowRead = time.Second
)

// WorkflowsSeen is what the hub keeps of a member's workflows.
type WorkflowsSeen struct {
	// Listed are the first maxWorkflows unfinished workflows, summarised, in the order read:
	// the BondModeFlipPlans, then the ReplicationUpgrades, each kind by name.
	Listed []fleetv1alpha1.MemberWorkflow
	// Unfinished counts every unfinished workflow, listed or not.
	Unfinished int
}

// see counts the workflow if it is unfinished, and lists it while there is room.
func (w *WorkflowsSeen) see(kind, name string, s nodewrightv1alpha1.WorkflowStatus, progress string) {
	if !unfinished(s.Phase) {
		return
	}
	w.Unfinished++
	if len(w.Listed) < maxWorkflows {
		w.Listed = append(w.Listed, clipWorkflow(workflow(kind, name, s, progress)))
	}
}

// clipWorkflow bounds each field to the summary's limits (a member's CRD may allow more), each
// stripped of what a terminal or a page would act on.
func clipWorkflow(w fleetv1alpha1.MemberWorkflow) fleetv1alpha1.MemberWorkflow {
	w.Kind, w.Name, w.Phase, w.Step, w.Progress = printable(w.Kind, 64), printable(w.Name, 253), printable(w.Phase, 32), printable(w.Step, 64), printable(w.Progress, 64)
	return w
}

// workflowKind is one kind of cluster-wide workflow the summary shows.
type workflowKind struct {
	Kind     string
	Resource schema.GroupVersionResource
	// read reads every object of the kind, one page at a time, into seen.
	read func(ctx context.Context, c client.Reader, seen *WorkflowsSeen) error
}

var workflowKinds = []workflowKind{
	{Kind: "BondModeFlipPlan", Resource: nodewrightv1alpha1.GroupVersion.WithResource("bondmodeflipplans"),
		read: func(ctx context.Context, c client.Reader, seen *WorkflowsSeen) error {
			return pages(ctx, c, func() *nodewrightv1alpha1.BondModeFlipPlanList { return &nodewrightv1alpha1.BondModeFlipPlanList{} },
				func(l *nodewrightv1alpha1.BondModeFlipPlanList) {
					for i := range l.Items {
						seen.see("BondModeFlipPlan", l.Items[i].Name, l.Items[i].Status.WorkflowStatus, l.Items[i].Status.Progress)
					}
				})
		}},
	{Kind: "ReplicationUpgrade", Resource: nodewrightv1alpha1.GroupVersion.WithResource("replicationupgrades"),
		read: func(ctx context.Context, c client.Reader, seen *WorkflowsSeen) error {
			return pages(ctx, c, func() *nodewrightv1alpha1.ReplicationUpgradeList { return &nodewrightv1alpha1.ReplicationUpgradeList{} },
				func(l *nodewrightv1alpha1.ReplicationUpgradeList) {
					for i := range l.Items {
						seen.see("ReplicationUpgrade", l.Items[i].Name, l.Items[i].Status.WorkflowStatus, l.Items[i].Status.Progress)
					}
				})
		}},
}

// pages lists from the API server a page at a time; each page is dropped once each has seen
// it.
func pages[L client.ObjectList](ctx context.Context, c client.Reader, newList func() L, each func(L)) error {
	next := ""
	for {
		list := newList()
		if err := c.List(ctx, list, client.Limit(workflowPageSize), client.Continue(next)); err != nil {
			return err
		}
		each(list)
		if next = list.GetContinue(); next == "" {
			return nil
		}
	}
}

// readWorkflows reads all the member's workflows. A kind the member does not serve (an older
// member) has none; a list whose continuation expired meanwhile starts again.
func readWorkflows(ctx context.Context, c client.Reader) (WorkflowsSeen, error) {
	for {
		var seen WorkflowsSeen
		var err error
		for _, k := range workflowKinds {
			err = k.read(ctx, c, &seen)
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				err = nil
			}
			if err != nil {
				err = fmt.Errorf("listing %ss: %w", k.Kind, err)
				break
			}
		}
		if !apierrors.IsResourceExpired(err) {
			return seen, err
		}
	}
}

// memberReader keeps what read finds of each engaged member, read again whenever an object
// of its resources changes on the member, and wakes the member's summary when it changed.
// Its reads are done by a few workers for every member, from a queue: a member whose
// objects changed is queued once however many changes it had meanwhile, and no sooner than
// minWorkflowRead, or as long as its last read took, after its last read began. A member at
// rest costs no goroutine but its watches'.
type memberReader[T any] struct {
	// what is what it reads, for the log.
	what      string
	resources []schema.GroupVersionResource
	read      func(ctx context.Context, c client.Reader) (T, error)
	equal     func(a, b T) bool
	wake      chan<- event.TypedGenericEvent[string]
	queue     workqueue.TypedDelayingInterface[string]
	// polled readers watch nothing: the health checks call Poll, which lists the resources'
	// metadata and queues a read when any object's version changed.
	polled bool

	mu      sync.Mutex
	members map[string]*memberRead[T]
}

// readWorkers is how many reads of members' objects one reader does at once.
const readWorkers = 8

// workflowReader keeps WorkflowsSeen for each engaged member.
type workflowReader = memberReader[WorkflowsSeen]

type memberRead[T any] struct {
	ctx    context.Context
	reader client.Reader
	// ok is false until a read succeeded; seen is the last that did. err is the last read's
	// error, nil once one succeeds again.
	ok   bool
	seen T
	err  error
	// next is the earliest time of the next read; retry backs off failed reads.
	next  time.Time
	retry *backoff
	// versions are the names and versions of the objects the last Poll listed.
	versions string
}

func newMemberReader[T any](what string, resources []schema.GroupVersionResource, read func(context.Context, client.Reader) (T, error),
	equal func(a, b T) bool, wake chan<- event.TypedGenericEvent[string]) *memberReader[T] {
	return &memberReader[T]{what: what, resources: resources, read: read, equal: equal, wake: wake, members: map[string]*memberRead[T]{},
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: ""})}
}

func newWorkflowReader(wake chan<- event.TypedGenericEvent[string]) *workflowReader {
	var resources []schema.GroupVersionResource
	for _, k := range workflowKinds {
		resources = append(resources, k.Resource)
	}
	return newMemberReader("workflows", resources, readWorkflows, equalSeen, wake)
}

// changed queues a read of the member, at its earliest.
func (r *memberReader[T]) changed(member string) {
	r.mu.Lock()
	m := r.members[member]
	var wait time.Duration
	if m != nil {
		wait = time.Until(m.next)
	}
	r.mu.Unlock()
	if m == nil {
		return
	}
	if wait > 0 {
		r.queue.AddAfter(member, wait)
	} else {
		r.queue.Add(member)
	}
}

// Seen is what the last read of the member that succeeded found: ok is false until one did,
// and err is then the last read's error. A read that fails after one succeeded (the member
// not answering, say) leaves what that one found, as a cache would: the summary still gets
// the rest, the member's health first.
func (r *memberReader[T]) Seen(member string) (seen T, ok bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.members[member]
	switch {
	case m == nil:
		return seen, false, nil
	case !m.ok:
		return seen, false, m.err
	}
	return m.seen, true, nil
}

// Start reads the queued members until the manager stops.
func (r *memberReader[T]) Start(ctx context.Context) error {
	context.AfterFunc(ctx, r.queue.ShutDown)
	var wg sync.WaitGroup
	for range readWorkers {
		wg.Go(func() {
			for {
				name, shutdown := r.queue.Get()
				if shutdown {
					return
				}
				r.readOne(name)
				r.queue.Done(name)
			}
		})
	}
	wg.Wait()
	return nil
}

// Engage reads the member until ctx ends (the member is removed or engaged anew).
func (r *memberReader[T]) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	rc, err := memberREST(cl)
	if err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	r.engage(ctx, name, restReader{rc: rc}, answeredGate(cl))
	if r.polled {
		return nil
	}
	gate := answeredGate(cl)
	for _, res := range r.resources {
		go func() {
			if waitAnswered(ctx, gate) {
				watchChanges(ctx, rc, res, func() { r.changed(name) })
			}
		}()
	}
	return nil
}

// Poll lists the metadata of the member's objects, a page of pollPageSize at a time, and
// queues a read when their names or versions differ from the last Poll's. It never says the
// summary changed: the read does.
func (r *memberReader[T]) Poll(ctx context.Context, name string, rc rest.Interface) pollResult {
	if !r.polled {
		return pollResult{read: true} // it reads what it watches
	}
	r.mu.Lock()
	m := r.members[name]
	r.mu.Unlock()
	if m == nil {
		return pollResult{}
	}
	h := sha256.New()
	answered := false // a request of this poll was answered
	for _, res := range r.resources {
		path := "/apis/" + res.GroupVersion().String() + "/" + res.Resource
		next := ""
		for {
			req := rc.Get().AbsPath(path).SetHeader("Accept", acceptMetadataList).Param("limit", strconv.Itoa(pollPageSize))
			if next != "" {
				req.Param("continue", next)
			}
			var l metadataPage
			raw, err := req.Do(ctx).Raw()
			var status apierrors.APIStatus
			answered = answered || err == nil || errors.As(err, &status)
			if err == nil {
				err = json.Unmarshal(raw, &l)
			}
			if err != nil {
				// Not served, not allowed, not answering, or the continuation expired: the read
				// says why (queued, it fails or finds what changed). A member that did not
				// answer is polled again at its next check.
				r.changed(name)
				return pollResult{read: answered, answered: answered, err: err}
			}
			for _, o := range l.Items {
				fmt.Fprintf(h, "%s/%s@%s\n", o.Metadata.Namespace, o.Metadata.Name, o.Metadata.ResourceVersion)
			}
			if next = l.Metadata.Continue; next == "" {
				break
			}
		}
	}
	versions := string(h.Sum(nil))
	r.mu.Lock()
	queued := m.versions != versions
	m.versions = versions
	r.mu.Unlock()
	if queued {
		r.changed(name)
	}
	return pollResult{read: true, answered: true}
}

// metadataPage is what a Poll decodes of a page of metadata: the objects' keys and versions,
// and the continue token; not their labels, annotations and managed fields.
type metadataPage struct {
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Namespace       string `json:"namespace"`
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"items"`
}

// pollPageSize is how many objects' metadata one page of a Poll holds.
const pollPageSize = 250

// engage keeps the member's reads until ctx ends, read by reader; the first once gate is
// closed.
func (r *memberReader[T]) engage(ctx context.Context, name string, reader client.Reader, gate <-chan struct{}) *memberRead[T] {
	m := &memberRead[T]{ctx: ctx, reader: reader, retry: newBackoff()}
	r.mu.Lock()
	r.members[name] = m
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		if r.members[name] == m {
			delete(r.members, name)
		}
		r.mu.Unlock()
	})
	go func() {
		if waitAnswered(ctx, gate) {
			r.changed(name)
		}
	}()
	return m
}

// readOne reads the member, if it is still engaged and its next read is due.
func (r *memberReader[T]) readOne(name string) {
	r.mu.Lock()
	m := r.members[name]
	r.mu.Unlock()
	if m == nil || m.ctx.Err() != nil {
		return
	}
	if wait := time.Until(m.next); wait > 0 {
		r.queue.AddAfter(name, wait)
		return
	}
	start := time.Now()
	seen, err := r.read(m.ctx, m.reader)
	if m.ctx.Err() != nil {
		return
	}
	wait := max(minWorkflowRead, time.Since(start))
	r.mu.Lock()
	changed := fmt.Sprint(err) != fmt.Sprint(m.err) || (err == nil && (!m.ok || !r.equal(seen, m.seen)))
	if err == nil {
		m.ok, m.seen = true, seen
		m.retry.reset()
	} else {
		wait = max(wait, m.retry.next())
	}
	m.err = err
	m.next = start.Add(wait)
	r.mu.Unlock()
	if err != nil {
		ctrllog.FromContext(m.ctx).V(1).Info("Reading the member failed", "member", name, "what", r.what, "error", err.Error())
		r.queue.AddAfter(name, time.Until(m.next)) // read again after the wait, changes or not
	}
	if changed {
		select {
		case r.wake <- event.TypedGenericEvent[string]{Object: name}:
		case <-m.ctx.Done():
		}
	}
}

func equalSeen(a, b WorkflowsSeen) bool {
	if a.Unfinished != b.Unfinished || len(a.Listed) != len(b.Listed) {
		return false
	}
	for i := range a.Listed {
		if a.Listed[i] != b.Listed[i] {
			return false
		}
	}
	return true
}

// watchChanges calls changed for every change of the resource's objects, until ctx ends. It
// watches metadata only and keeps nothing of what it sees but the resource version to
// resume from; it lists (one object) only to get a version to start from, again when the
// watch cannot resume. A resource the member does not serve, or does not let the hub list,
// is tried again later.
func watchChanges(ctx context.Context, rc rest.Interface, gvr schema.GroupVersionResource, changed func()) {
	r := resource{path: "/apis/" + gvr.GroupVersion().String() + "/" + gvr.Resource, metadataOnly: true}
	r.follow(ctx, rc, 1,
		func(*listed) error { changed(); return nil }, // whatever happened before this version
		func(string, json.RawMessage) error { changed(); return nil },
		func(error) {})
}

// backoff is the wait before retrying a failed read or watch: 1s, doubling to 2 minutes.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, time.Second), 2*time.Minute)
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// sleep waits d, and says false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
