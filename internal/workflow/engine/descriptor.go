package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/servedapis"
	"github.com/spectrocloud/nodewright/internal/workflow"
	"github.com/spectrocloud/nodewright/internal/workflow/children"
)

// Descriptor is what the engine, the operator's wiring, its cache, the cluster-wide claim and
// admission know of one workflow kind: its type, its plan, its words, the labels and
// finalizer it puts on objects, the kinds of the children it makes, whether it is cluster-wide
// and the gates it adds. A kind states it once (internal/workflows holds every kind's); the
// kind's controller supplies only the actions (Workflow).
type Descriptor[O Object] struct {
	// Kind is what the shared code calls the kind and says of its outcomes.
	Kind workflow.Kind
	// Controller names the kind's controller (its logs and metrics): the kind in lower case.
	Controller string
	// ShortNames are the CRD's short names (its +kubebuilder:resource marker), which the CLI
	// takes for the kind as kubectl does.
	ShortNames []string
	// New is an empty object of the kind; NewList an empty list of them.
	New     func() O
	NewList func() client.ObjectList
	// Plan is o's plan, fixed by its spec (which cannot change once it started).
	Plan func(o O) workflow.Plan
	// Plans are the kind's plans, each shape once (a flip's of 1 to MaxNodes nodes): the
	// conformance test runs on each.
	Plans func() []workflow.Plan
	// Finalizer holds a workflow until a running one is rolled back and tidied up.
	Finalizer string
	// NameLabel and UIDLabel name the workflow on each of its children (children.Owner).
	NameLabel, UIDLabel string
	// Children are the kinds of the objects the workflow makes, each labelled with its owner
	// (children.Owner): a change to one wakes its owner (OwnerOf), and the operator's cache
	// holds only those labelled, unless the kind says otherwise.
	Children []Child
	// APIs are the kinds the workflow needs that a cluster may not serve (see apis.go).
	APIs servedapis.Kinds
	// ClusterWide: one workflow of all the cluster-wide kinds at a time holds the claim
	// (the Lease LockName); the plan is a workflow.GatedPlan.
	ClusterWide bool
	// ClusterPhases are the NodewrightCluster phases in which a step with GateHealth may
	// start.
	ClusterPhases []nwv1.ClusterPhase
	// Gates are checks the kind adds to Chain, after it.
	Gates []Gate
	// NeedsAgents: the workflow changes nodes through their agents, so without agents (no
	// --agent-namespace) it has no controller and admission refuses it; only such a kind
	// may own a NodeOperation.
	NeedsAgents bool
	// Nodes, when set, lists the nodes a workflow's spec names, each with its field's path:
	// admission refuses a workflow that names a node the cluster does not have, naming the
	// field.
	Nodes func(o O) []NodeField
	// Admit, when set, is the kind's own admission check of a workflow against the settings in
	// force (the EdgeProfile, say), at its creation (old nil) and at each change of its spec
	// before it starts: an error refuses it, naming the field and why the value cannot work.
	Admit func(ctx context.Context, c client.Reader, old, o O) error
	// Changing, when set, says from a cluster-wide workflow's status which nodes it changes
	// now, or is about to (those of the step that runs or waits), for what keeps out of node
	// work's way without claiming it (HolderOf); known is false when the status cannot say.
	// A kind without it changes, as far as anyone knows, every node.
	Changing func(o O) (nodes []string, known bool)
}

// NodeField is a node a workflow's spec names, and the path of the field that names it:
// spec.peerNodes[1].
type NodeField struct{ Path, Name string }

// NodeList is the NodeFields of the list names in the field path: path[0], path[1], ...
func NodeList(path string, names []string) []NodeField {
	out := make([]NodeField, len(names))
	for i, n := range names {
		out[i] = NodeField{Path: fmt.Sprintf("%s[%d]", path, i), Name: n}
	}
	return out
}

// Child is a kind of object a workflow makes.
type Child struct {
	Object client.Object
	// Unwatched: a change to one wakes no workflow (a Job's Pods: the Job's change does).
	Unwatched bool
	// AlsoOthers: the workflow reads objects of the kind that it did not make (a VM's claims),
	// so the operator's cache holds every one, not only the labelled.
	AlsoOthers bool
	// InAgentNamespace: made in the node agents' namespace (a NodeOperation), the only one
	// the operator's cache watches for the kind.
	InAgentNamespace bool
}

// Owner is o as its children's labels name it.
func (d *Descriptor[O]) Owner(o O) children.Owner {
	return children.Owner{Name: o.GetName(), NameLabel: d.NameLabel, UID: o.GetUID(), UIDLabel: d.UIDLabel, Noun: d.Kind.Noun}
}

// ControllerRef is the owner reference that makes o the controller of a child: the child
// goes with it.
func (d *Descriptor[O]) ControllerRef(o O) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: nwv1.GroupVersion.String(), Kind: d.Kind.Name, Name: o.GetName(), UID: o.GetUID(),
		Controller: ptr.To(true)}
}

// Validate reports a descriptor that cannot work: a missing part, a cluster-wide kind whose
// plan has no gates.
func (d *Descriptor[O]) Validate() error {
	switch {
	case d.Kind.Name == "" || d.Kind.Noun == "" || d.Kind.AuditAction == "":
		return fmt.Errorf("a workflow kind needs its name, noun and audit action (Kind): %+v", d.Kind)
	case d.Controller == "":
		return fmt.Errorf("%s: no controller name", d.Kind.Name)
	case d.New == nil || d.NewList == nil || d.Plan == nil || d.Plans == nil:
		return fmt.Errorf("%s: New, NewList, Plan and Plans are required", d.Kind.Name)
	case d.Finalizer == "":
		return fmt.Errorf("%s: no finalizer", d.Kind.Name)
	case len(d.Children) > 0 && (d.NameLabel == "" || d.UIDLabel == ""):
		return fmt.Errorf("%s: children need the owner's NameLabel and UIDLabel", d.Kind.Name)
	}
	_, gated := d.Plan(d.New()).(workflow.GatedPlan)
	if d.ClusterWide && !gated {
		return fmt.Errorf("%s: a cluster-wide kind's plan has gates (workflow.GatedPlan)", d.Kind.Name)
	}
	return nil
}

// Deps are what every workflow controller gets from the operator, once.
type Deps struct {
	Recorder record.EventRecorder
	// Clock is the real clock when nil.
	Clock clock.PassiveClock
	// Audit, when set, receives one record per transition; Actor is who they say did it.
	Audit audit.Appender
	Actor string
	// LockNamespace is where the claim of the cluster-wide workflows is kept (the operator's
	// namespace); required by a cluster-wide kind.
	LockNamespace string
	// Discovery, when set, tells a kind with APIs which the cluster serves (a test's); the
	// manager's API server otherwise.
	Discovery servedapis.Discovery
}

var (
	describedMu sync.Mutex
	described   []Summary
)

// Summary is what is known of a described kind without its type: for code that handles every
// kind alike (admission, the claim).
type Summary struct {
	Kind workflow.Kind
	// New makes an empty object of the kind; NewList an empty list of them.
	New     func() Object
	NewList func() client.ObjectList
	// List lists the objects of a list of the kind.
	List        func(client.ObjectList) []Object
	ClusterWide bool
	NeedsAgents bool
	APIs        servedapis.Kinds
	ShortNames  []string
	// Nodes is the descriptor's Nodes; nil when it has none.
	Nodes func(Object) []NodeField
	// Admit is the descriptor's Admit (old nil at a creation); nil when it has none.
	Admit func(ctx context.Context, c client.Reader, old, o Object) error
	// Changing is the descriptor's Changing; nil when it has none.
	Changing func(Object) (nodes []string, known bool)
}

// Describe checks a kind's descriptor (Validate; a descriptor that cannot work is a
// programming error, so it panics at start) and returns it, adding the kind to Described: a
// cluster-wide kind joins the kinds whose workflows share the claim. Declare every descriptor
// with it.
func Describe[O Object](d *Descriptor[O]) *Descriptor[O] {
	if err := d.Validate(); err != nil {
		panic(err)
	}
	describedMu.Lock()
	defer describedMu.Unlock()
	described = append(described, Summary{Kind: d.Kind, New: func() Object { return d.New() }, NewList: d.NewList,
		List: func(l client.ObjectList) []Object {
			var out []Object
			for _, o := range items[O](l) {
				out = append(out, o)
			}
			return out
		},
		ClusterWide: d.ClusterWide, NeedsAgents: d.NeedsAgents, APIs: d.APIs, ShortNames: d.ShortNames})
	if d.Nodes != nil {
		described[len(described)-1].Nodes = func(o Object) []NodeField {
			typed, ok := o.(O)
			if !ok {
				return nil
			}
			return d.Nodes(typed)
		}
	}
	if d.Admit != nil {
		described[len(described)-1].Admit = func(ctx context.Context, c client.Reader, old, o Object) error {
			typed, ok := o.(O)
			if !ok {
				return nil
			}
			var was O
			if old != nil {
				if was, ok = old.(O); !ok {
					return nil
				}
			}
			return d.Admit(ctx, c, was, typed)
		}
	}
	if d.Changing != nil {
		described[len(described)-1].Changing = func(o Object) ([]string, bool) {
			typed, ok := o.(O)
			if !ok {
				return nil, false
			}
			return d.Changing(typed)
		}
	}
	slices.SortFunc(described, func(a, b Summary) int { return strings.Compare(a.Kind.Name, b.Kind.Name) })
	return d
}

// Described lists the kinds described (Describe) in this program, by name.
func Described() []Summary {
	describedMu.Lock()
	defer describedMu.Unlock()
	return slices.Clone(described)
}

// ClusterWide lists an empty object of each cluster-wide kind described: one of their
// workflows at a time holds the claim, and the deletion of any frees it.
func ClusterWide() []client.Object {
	var out []client.Object
	for _, k := range Described() {
		if k.ClusterWide {
			out = append(out, k.New())
		}
	}
	return out
}

// Action is a step's action: it performs what the step is for and says what it observed. It
// must be idempotent: after a crash it runs again for the same step. Whatever it changes in
// the object's status is written in the engine's one patch; it changes nothing else of the
// object (spec, labels, annotations: such a change is refused as a failure of the step).
type Action[O Object] func(ctx context.Context, run *Run[O]) (Outcome, error)

// Actions is a kind's table of actions, by the key of each step (workflow.ActionKey).
// workflowtest.Conformance fails a plan with a step whose key has no action.
type Actions[O Object] map[workflow.Step]Action[O]

// Keys lists the keys that have an action, sorted.
func (a Actions[O]) Keys() []workflow.Step {
	keys := make([]workflow.Step, 0, len(a))
	for k, act := range a {
		if act != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// OwnerOf maps a child (a Job, a NodeOperation) to the workflow of this kind whose UID its
// UIDLabel carries: in the child's namespace for a namespaced kind, anywhere for a
// cluster-scoped one. A name label alone is not trusted (it may be a hash of a long name).
func (e *Engine[O]) OwnerOf(ctx context.Context, child client.Object) []reconcile.Request {
	uid := child.GetLabels()[e.Descriptor.UIDLabel]
	if uid == "" {
		return nil
	}
	var opts []client.ListOption
	if e.namespaced {
		opts = append(opts, client.InNamespace(child.GetNamespace()))
	}
	return e.requests(ctx, func(o O) bool { return string(o.GetUID()) == uid }, opts...)
}

// requests lists the kind's workflows (from the cache) and names those match takes.
func (e *Engine[O]) requests(ctx context.Context, match func(O) bool, opts ...client.ListOption) []reconcile.Request {
	list := e.Descriptor.NewList()
	if err := e.Client.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing workflows to wake", "kind", e.Descriptor.Kind.Name)
		return nil
	}
	var out []reconcile.Request
	for _, o := range items[O](list) {
		if match(o) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return out
}

// Active maps any change to the kind's workflows that have not finished.
func (e *Engine[O]) Active(ctx context.Context, _ client.Object) []reconcile.Request {
	return e.requests(ctx, func(o O) bool { return !o.GetWorkflowStatus().Phase.Finished() })
}

// All maps any change to every workflow of the kind.
func (e *Engine[O]) All(ctx context.Context, _ client.Object) []reconcile.Request {
	return e.requests(ctx, func(O) bool { return true })
}

// items are the objects of list that are of type O.
func items[O Object](list client.ObjectList) []O {
	all, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	out := make([]O, 0, len(all))
	for _, item := range all {
		if o, ok := item.(O); ok {
			out = append(out, o)
		}
	}
	return out
}

// Scoped is a table of actions that each take a view S of the run (the objects a step
// reads, say), made by newScope once per reconcile, before the action.
func Scoped[O Object, S any](newScope func(context.Context, *Run[O]) (S, error), table map[workflow.Step]func(context.Context, S) (Outcome, error)) Actions[O] {
	out := make(Actions[O], len(table))
	for key, act := range table {
		out[key] = func(ctx context.Context, run *Run[O]) (Outcome, error) {
			s, err := newScope(ctx, run)
			if err != nil {
				return Outcome{}, err
			}
			return act(ctx, s)
		}
	}
	return out
}
