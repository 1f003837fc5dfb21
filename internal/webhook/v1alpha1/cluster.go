package v1alpha1

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/bridge"
	"github.com/spectrocloud/nodewright/internal/management"
	"github.com/spectrocloud/nodewright/internal/profile"
	"github.com/spectrocloud/nodewright/internal/profiletrust"
)

// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-nodewrightcluster,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=create;update,versions=v1alpha1,name=mnodewrightcluster-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-nodewrightcluster,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=nodewrightclusters,verbs=create;update,versions=v1alpha1,name=vnodewrightcluster-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/mutate-nodewright-spectrocloud-com-v1alpha1-edgeprofile,mutating=true,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=create;update,versions=v1alpha1,name=medgeprofile-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/validate-nodewright-spectrocloud-com-v1alpha1-edgeprofile,mutating=false,failurePolicy=fail,sideEffects=NoneOnDryRun,groups=nodewright.spectrocloud.com,resources=edgeprofiles,verbs=create;update,versions=v1alpha1,name=vedgeprofile-v1alpha1.nodewright.spectrocloud.com,admissionReviewVersions=v1

// clusters admits the NodewrightCluster singleton, the profile it names and the switch of its
// management mode.
type clusters struct {
	client          client.Reader
	trust           profiletrust.Trust
	legacyNamespace string
	// agents reads what the switch to Managed depends on, from the API server.
	agents management.Reader
}

func (w *clusters) create(ctx context.Context, c *nwv1.NodewrightCluster) (admission.Warnings, error) {
	if c.Name != nwv1.NodewrightClusterName {
		return nil, fmt.Errorf("metadata.name: NodewrightCluster is a singleton and must be named %q, not %q", nwv1.NodewrightClusterName, c.Name)
	}
	if err := bridge.InScope(c, w.legacyNamespace); err != nil {
		return nil, err
	}
	if err := w.checkProfile(ctx, c, ""); err != nil {
		return nil, err
	}
	return nil, w.checkManagement(ctx, nil, c)
}

func (w *clusters) update(ctx context.Context, old, c *nwv1.NodewrightCluster) (admission.Warnings, error) {
	if err := bridge.InScope(c, w.legacyNamespace); err != nil && old.Spec.Legacy != c.Spec.Legacy {
		return nil, err
	}
	if old.Spec.ProfileRef == nil || c.Spec.ProfileRef == nil || *old.Spec.ProfileRef != *c.Spec.ProfileRef {
		active := ""
		if old.Status.Profile != nil {
			active = old.Status.Profile.Version
		}
		if err := w.checkProfile(ctx, c, active); err != nil {
			return nil, err
		}
	}
	return nil, w.checkManagement(ctx, old, c)
}

// checkManagement refuses a switch to Managed (or a cluster created Managed) that could not
// take effect: a Node whose agent does not report, or a legacy DaemonSet that still has pods,
// named in the refusal. Observe is always allowed, and so is an update that leaves Managed as
// it was. The NodewrightCluster controller checks again before the switch takes effect.
func (w *clusters) checkManagement(ctx context.Context, old, c *nwv1.NodewrightCluster) error {
	if management.Requested(c) != nwv1.ManagementManaged || (old != nil && management.Requested(old) == nwv1.ManagementManaged) {
		return nil
	}
	// The legacy names and the threshold in force: the profile's once one is (the stored
	// status says which).
	observedAs := c.DeepCopy()
	if old != nil {
		observedAs.Status = old.Status
	}
	observedAs = bridge.Effective(ctx, w.client, observedAs)
	staleAfter := bridge.StaleAfter(observedAs)
	r, err := w.agents.Readiness(ctx, observedAs, time.Now(), staleAfter)
	if err != nil {
		return err
	}
	if blockers := r.Blockers(); len(blockers) > 0 {
		return fmt.Errorf("spec.management: Managed is refused while %s; the cluster stays in Observe", strings.Join(blockers, "; "))
	}
	return nil
}

// checkProfile refuses a profileRef to a profile that does not exist, does not verify, or
// is a lower version than the one in force.
func (w *clusters) checkProfile(ctx context.Context, c *nwv1.NodewrightCluster, active string) error {
	if c.Spec.ProfileRef == nil {
		return nil
	}
	p := &nwv1.EdgeProfile{}
	if err := w.client.Get(ctx, client.ObjectKey{Name: c.Spec.ProfileRef.Name}, p); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("spec.profileRef.name: EdgeProfile %q not found", c.Spec.ProfileRef.Name)
		}
		return fmt.Errorf("reading EdgeProfile %s: %w", c.Spec.ProfileRef.Name, err)
	}
	if _, err := w.trust.Verify(ctx, p); err != nil {
		return fmt.Errorf("spec.profileRef.name: EdgeProfile %s cannot be used: %w", p.Name, err)
	}
	// A profile's legacy names replace the cluster's (bridge.WithProfile).
	if err := bridge.InScope(bridge.WithProfile(c, p), w.legacyNamespace); err != nil && p.Spec.Legacy != nil {
		return fmt.Errorf("spec.profileRef.name: EdgeProfile %s names legacy objects the operator does not read (the profile's %w)", p.Name, err)
	}
	floor, err := w.trust.Floor(ctx)
	if err != nil {
		return err
	}
	for _, before := range []string{floor, active} {
		if err := profile.CheckUpgrade(before, p.Spec.Version); err != nil {
			return fmt.Errorf("spec.profileRef.name: EdgeProfile %s: %w", p.Name, err)
		}
	}
	return nil
}

// profiles admits EdgeProfiles: signed by a trusted key, and never downgraded.
type profiles struct {
	client client.Reader
	trust  profiletrust.Trust
}

func (w *profiles) create(ctx context.Context, p *nwv1.EdgeProfile) (admission.Warnings, error) {
	if err := profile.Validate(p.Spec); err != nil {
		return nil, err
	}
	_, err := w.trust.Verify(ctx, p)
	return nil, err
}

func (w *profiles) update(ctx context.Context, old, p *nwv1.EdgeProfile) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, p.Spec) && slices.Equal(old.Signature, p.Signature) {
		return nil, nil
	}
	if err := profile.CheckUpgrade(old.Spec.Version, p.Spec.Version); err != nil {
		return nil, err
	}
	if err := w.inUseDowngrade(ctx, p); err != nil {
		return nil, err
	}
	return w.create(ctx, p)
}

// inUseDowngrade refuses lowering a profile below the version the cluster has in force.
func (w *profiles) inUseDowngrade(ctx context.Context, p *nwv1.EdgeProfile) error {
	c := &nwv1.NodewrightCluster{}
	err := w.client.Get(ctx, client.ObjectKey{Name: nwv1.NodewrightClusterName}, c)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the NodewrightCluster: %w", err)
	}
	if c.Status.Profile == nil || c.Status.Profile.Name != p.Name {
		return nil
	}
	floor, err := w.trust.Floor(ctx)
	if err != nil {
		return err
	}
	for _, before := range []string{floor, c.Status.Profile.Version} {
		if err := profile.CheckUpgrade(before, p.Spec.Version); err != nil {
			return err
		}
	}
	return nil
}

// errNodeMissing is a node an object names that is not in the cluster.
var errNodeMissing = errors.New("is not a Node of the cluster")

// nodeExists checks that the node the field at path names is a Node of the cluster, and says
// which field names one that is not: spec.peerNodes[1]: "ghost-node" is not a Node of the
// cluster. A workflow's nodes and a NodeOperation's are checked by it.
func nodeExists(ctx context.Context, c client.Reader, path, name string) error {
	err := c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %q %w", path, name, errNodeMissing)
	}
	if err != nil {
		return fmt.Errorf("reading Node %s: %w", name, err)
	}
	return nil
}
