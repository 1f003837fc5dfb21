package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crsource "sigs.k8s.io/controller-runtime/pkg/source"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/spectrocloud/nodewright/api/fleet/v1alpha1"
)

// The member objects the hub reads besides the NodewrightCluster and the workflows, all in
// the member's Nodewright namespace.
const (
	CheckpointConfigMap = "nodewright-audit-checkpoint"
	OperatorDeployment  = "nodewright-operator"
	versionLabel        = "app.kubernetes.io/version"
	// clusterName is the NodewrightCluster singleton's name; every member event maps to it.
	clusterName = "nodewright"
)

// SummaryReconciler keeps one member's NodewrightClusterSummary.
type SummaryReconciler struct {
	Manager mcmanager.Manager
	// Hub reads and writes the summaries (the hub manager's client).
	Hub     client.Client
	Checker *Checker
	// KubeconfigNamespace is where the kubeconfig Secrets are, to name a member's registration.
	KubeconfigNamespace string
	// InventoryNamespace is where the ClusterProfiles are.
	InventoryNamespace string
	// Members say why a registration was refused.
	Members *members
	// Objects are the members' NodewrightCluster, checkpoint and operator version.
	Objects *objectWatcher
	// Workflows are the members' workflows as the hub keeps them.
	Workflows *workflowReader
	// Boots are the members' nodes' boots as the hub keeps them.
	Boots *bootReader
	// Wake carries the members whose refusal, workflows or boots changed.
	Wake <-chan event.TypedGenericEvent[string]
	// MemberNamespace is the Nodewright namespace on the members.
	MemberNamespace string
	// Witness says whose countersignature the recorded audit checkpoints need.
	Witness WitnessOptions
}

// SetupWithManager wakes a member's summary on each change the hub's watches and health
// checks of the member see. It is a controller of the hub's own cluster: it engages nothing
// on the members (objectWatcher, workflowReader, bootReader and Checker do).
func (r *SummaryReconciler) SetupWithManager(mgr mcmanager.Manager) error {
	toMember := handler.TypedFuncs[string, mcreconcile.Request]{
		GenericFunc: func(_ context.Context, e eventString, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
			q.Add(mcreconcile.Request{ClusterName: e.Object, Request: reconcile.Request{NamespacedName: types.NamespacedName{Name: clusterName}}})
		},
	}
	health := crsource.TypedChannel(r.Checker.Events(), toMember)
	wake := crsource.TypedChannel(r.Wake, toMember)
	return builder.TypedControllerManagedBy[mcreconcile.Request](mgr.GetLocalManager()).Named("nodewrightclustersummary").
		// Several workers: one member slow to answer delays no other's summary.
		WithOptions(controller.TypedOptions[mcreconcile.Request]{MaxConcurrentReconciles: summaryWorkers}).
		WatchesRawSource(health).
		WatchesRawSource(wake).
		Complete(r)
}

// summaryWorkers is how many summaries are worked on at once: a burst of changes across
// thousands of members is as many status writes to the hub's API server.
const summaryWorkers = 32

// registrationWorkers is how many registrations are engaged at once.
const registrationWorkers = 8

// Reconcile writes the member's summary when what the hub sees of it changed.
func (r *SummaryReconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
	reg, ok := registrationOf(req.ClusterName, r.KubeconfigNamespace)
	if !ok {
		return ctrl.Result{}, nil
	}
	_, err := r.Manager.GetCluster(ctx, req.ClusterName)
	if errors.Is(err, multicluster.ErrClusterNotFound) {
		// A provider lists a member only once it is engaged, after the first events of its
		// watches: retry while the registration exists. A member engaged before and no longer
		// (its new credentials or access did not work) is not reachable: its summary says so.
		// A removed member's summary is the membership controller's. A refused registration
		// gets a summary that says why.
		if exists, err := registered(ctx, r.Hub, r.namespaces(), reg); err != nil || !exists {
			return ctrl.Result{}, err
		}
		if why, refused := r.Members.Refused(req.ClusterName); refused {
			return ctrl.Result{}, r.refused(ctx, reg, why)
		}
		if err := r.notEngaged(ctx, reg); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, fmt.Errorf("member %s is not engaged", req.ClusterName)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	// The summary is made before the member is read: at start-up, thousands of them are as
	// many writes to the hub's API server, which then overlap the hub's first reads of the
	// members rather than follow them.
	summary, err := r.summary(ctx, reg)
	if err != nil || summary == nil {
		return ctrl.Result{}, err
	}
	// A member whose objects cannot be listed (its role does not grant them, say) has its
	// summary retried, the error said, until they can. The first list of each object, and
	// the first read of its workflows, wake the summary.
	observed, listed, err := r.Objects.Observed(req.ClusterName)
	if err != nil || !listed {
		return ctrl.Result{}, r.notRead(ctx, summary, req.ClusterName, err)
	}
	workflows, read, err := r.Workflows.Seen(req.ClusterName)
	if err != nil || !read {
		return ctrl.Result{}, r.notRead(ctx, summary, req.ClusterName, err)
	}
	observed.Workflows = workflows
	status := summary.Status.DeepCopy()
	setObserved(status, observed)
	boots, bootsRead, bootsErr := r.Boots.Seen(req.ClusterName)
	setBoots(status, boots, bootsRead, bootsErr)
	recheck := setCheckpoint(status, observed.Published, r.Witness, time.Now())
	setHealth(status, r.Checker.Health(req.ClusterName))
	if equality.Semantic.DeepEqual(*status, summary.Status) {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	if err := r.writeStatus(ctx, summary, status); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing the summary %s: %w", summary.Name, err)
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// notRead is the summary of a member whose objects are not read yet: it says whether the
// member answers once its checks found that it does not, or that it does where the summary
// said otherwise (not answering, a refused registration), and nothing more (a member that
// did not answer since the hub started has a summary that says so). A new summary so gets
// no write until its member is read. It returns why the objects could not be read, if they
// could not.
func (r *SummaryReconciler) notRead(ctx context.Context, s *fleetv1alpha1.NodewrightClusterSummary, member string, readErr error) error {
	said := meta.FindStatusCondition(s.Status.Conditions, fleetv1alpha1.ConditionReachable)
	if h := r.Checker.Health(member); h.Known && (!h.Reachable || said != nil && said.Status != metav1.ConditionTrue) {
		status := s.Status.DeepCopy()
		setHealth(status, h)
		if !equality.Semantic.DeepEqual(*status, s.Status) {
			if err := r.writeStatus(ctx, s, status); err != nil {
				return fmt.Errorf("writing the summary %s: %w", s.Name, err)
			}
		}
	}
	if readErr != nil {
		return fmt.Errorf("reading member %s: %w", member, readErr)
	}
	return nil
}

// notEngaged marks an existing summary not reachable: the hub holds no connection to the
// member.
func (r *SummaryReconciler) notEngaged(ctx context.Context, reg fleetv1alpha1.Registration) error {
	var s fleetv1alpha1.NodewrightClusterSummary
	if err := r.Hub.Get(ctx, types.NamespacedName{Name: SummaryName(reg)}, &s); err != nil || s.Spec.Registration != reg {
		return client.IgnoreNotFound(err)
	}
	status := s.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse,
		Reason: "NotEngaged", Message: "the hub holds no connection to the member: its registration's credentials or access could not be used (the hub's log says why)"})
	if equality.Semantic.DeepEqual(*status, s.Status) {
		return nil
	}
	return r.writeStatus(ctx, &s, status)
}

// refused writes why the hub refused the member's registration, creating its summary: the
// hub never engaged the member, or no longer does.
func (r *SummaryReconciler) refused(ctx context.Context, reg fleetv1alpha1.Registration, why refusal) error {
	s, err := r.summary(ctx, reg)
	if err != nil || s == nil {
		return err
	}
	status := s.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: fleetv1alpha1.ConditionReachable, Status: metav1.ConditionFalse,
		Reason: why.Reason, Message: clip(why.Message, 32768)})
	if equality.Semantic.DeepEqual(*status, s.Status) {
		return nil
	}
	return r.writeStatus(ctx, s, status)
}

// writeStatus writes the summary's status whole, at the version of the summary read: one
// changed since is a conflict, and the member's summary is worked on again. The whole status
// costs the hub's API server less than a merge patch of what changed (it applies no patch to
// its copy: about a tenth less of its CPU a write, measured on 1,000 summaries), and a burst
// of changes across the fleet is as many writes. The hub is the summaries' only writer; a
// field its types do not know (an older hub's, after a newer one wrote it) is dropped.
func (r *SummaryReconciler) writeStatus(ctx context.Context, s *fleetv1alpha1.NodewrightClusterSummary, status *fleetv1alpha1.NodewrightClusterSummaryStatus) error {
	s.Status = *status
	return r.Hub.Status().Update(ctx, s)
}

func (r *SummaryReconciler) namespaces() namespaces {
	return namespaces{Kubeconfig: r.KubeconfigNamespace, Inventory: r.InventoryNamespace}
}

// summary gets the member's summary, creating it while its registration exists. It returns
// nil when the registration is gone, or when another registration owns the name.
func (r *SummaryReconciler) summary(ctx context.Context, reg fleetv1alpha1.Registration) (*fleetv1alpha1.NodewrightClusterSummary, error) {
	var s fleetv1alpha1.NodewrightClusterSummary
	name := SummaryName(reg)
	err := r.Hub.Get(ctx, types.NamespacedName{Name: name}, &s)
	if err == nil {
		if s.Spec.Registration != reg {
			ctrl.LoggerFrom(ctx).Info("Another registration owns the summary's name; not written", "summary", name, "owner", s.Spec.Registration)
			return nil, nil
		}
		return &s, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if exists, err := registered(ctx, r.Hub, r.namespaces(), reg); err != nil || !exists {
		return nil, err
	}
	s = fleetv1alpha1.NodewrightClusterSummary{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: fleetv1alpha1.NodewrightClusterSummarySpec{Registration: reg}}
	if err := r.Hub.Create(ctx, &s); err != nil {
		return nil, fmt.Errorf("creating the summary %s: %w", name, err)
	}
	return &s, nil
}

type eventString = event.TypedGenericEvent[string]
