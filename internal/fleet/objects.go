package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nodewrightv1alpha1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// objectWatcher keeps, for each engaged member, the three objects its summary shows whole:
// its NodewrightCluster `nodewright`, the checkpoint ConfigMap and the operator's version.
// The first two are watched by name (a metadata.name field selector, which is what lets the
// member's Role grant the ConfigMap in its namespace by name), and kept as the summary needs
// them: the ConfigMap's two keys. The operator writes its version to the NodewrightCluster's
// status.operatorVersion, where the hub reads it from the watch. An operator that predates
// that field does not: its version is then the operator Deployment's version label, read
// with the health checks (Poll, every HealthOptions.PollInterval): a watch costs two
// goroutines for as long as it lasts (the hub's and HTTP/2's), and a member may cost the hub
// ten.
type objectWatcher struct {
	memberNamespace string
	wake            chan<- event.TypedGenericEvent[string]

	mu      sync.Mutex
	members map[string]*memberObjects
}

// The objects, by their index in memberObjects.listed.
const (
	objCluster = iota
	objCheckpoint
	objDeployment
	objCount
)

type memberObjects struct {
	// listed says which objects were listed once; err is the last failed list of one not
	// yet listed. The Deployment counts as listed once the NodewrightCluster said the
	// operator's version.
	listed   [objCount]bool
	err      error
	observed Observed
	// deployment is the operator Deployment's path.
	deployment string
	// version is the operator's version as last known: published in the NodewrightCluster's
	// status, or else the Deployment's version label as last polled. A version no longer
	// published (the NodewrightCluster gone, or its field cleared) stays shown until the
	// next poll reads the Deployment, rather than none.
	version string
}

// published is the operator's version as the member's NodewrightCluster says it; "" when it
// does not (it has none, or its operator predates status.operatorVersion).
func (m *memberObjects) published() string {
	if m.observed.Cluster == nil {
		return ""
	}
	return strings.TrimSpace(m.observed.Cluster.Status.OperatorVersion)
}

func newObjectWatcher(memberNamespace string, wake chan<- event.TypedGenericEvent[string]) *objectWatcher {
	return &objectWatcher{memberNamespace: memberNamespace, wake: wake, members: map[string]*memberObjects{}}
}

// Start waits for the manager to stop; the watches run per engagement.
func (w *objectWatcher) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Observed is what the member's objects say, once each was listed: ok is false until then,
// and err is the last failed list meanwhile.
func (w *objectWatcher) Observed(member string) (o Observed, ok bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.members[member]
	if m == nil {
		return o, false, nil
	}
	for _, l := range m.listed {
		if !l {
			return o, false, m.err
		}
	}
	o = m.observed
	o.NodewrightVersion = m.version
	return o, true, nil
}

// Engage watches the member's objects until ctx ends (the member is removed or engaged anew).
func (w *objectWatcher) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	rc, err := memberREST(cl)
	if err != nil {
		return fmt.Errorf("member %s: %w", name, err)
	}
	gate := answeredGate(cl)
	ns := "/namespaces/" + w.memberNamespace
	m := &memberObjects{deployment: "/apis/apps/v1" + ns + "/deployments/" + OperatorDeployment}
	w.mu.Lock()
	w.members[name] = m
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		if w.members[name] == m {
			delete(w.members, name)
		}
		w.mu.Unlock()
	})
	named := func(n string) string { return "metadata.name=" + n }
	watches := []struct {
		index int
		res   resource
		set   func(o *Observed, raw json.RawMessage) error
	}{
		{objCluster, resource{path: "/apis/" + nodewrightv1alpha1.GroupVersion.String() + "/nodewrightclusters", fieldSelector: named(clusterName)},
			func(o *Observed, raw json.RawMessage) error {
				o.Cluster = nil
				if raw == nil {
					return nil
				}
				var c nodewrightv1alpha1.NodewrightCluster
				if err := json.Unmarshal(raw, &c); err != nil {
					return fmt.Errorf("the member's NodewrightCluster: %w", err)
				}
				o.Cluster = &c
				return nil
			}},
		{objCheckpoint, resource{path: "/api/v1" + ns + "/configmaps", fieldSelector: named(CheckpointConfigMap)},
			func(o *Observed, raw json.RawMessage) error {
				o.Published = Published{}
				if raw == nil {
					return nil
				}
				var cm corev1.ConfigMap
				if err := json.Unmarshal(raw, &cm); err != nil {
					return fmt.Errorf("the member's checkpoint ConfigMap: %w", err)
				}
				line, found := cm.Data[operator.CheckpointKey]
				o.Published = Published{Found: found && line != "", Line: line, Witnessed: cm.Data[operator.WitnessedKey]}
				return nil
			}},
	}
	for _, x := range watches {
		// set applies one object (nil: none) and wakes the summary when what it shows changed.
		set := func(raw json.RawMessage) error {
			w.mu.Lock()
			before := m.observed
			err := x.set(&m.observed, raw)
			first := !m.listed[x.index]
			m.listed[x.index] = true
			if v := m.published(); v != "" {
				m.version = v
				m.listed[objDeployment] = true // not polled while the NodewrightCluster says it
			}
			changed := first || !equality.Semantic.DeepEqual(before, m.observed)
			w.mu.Unlock()
			if err != nil {
				return err
			}
			if changed {
				select {
				case w.wake <- event.TypedGenericEvent[string]{Object: name}:
				case <-ctx.Done():
				}
			}
			return nil
		}
		onList := func(l *listed) error {
			var raw json.RawMessage
			if len(l.Items) > 0 {
				raw = l.Items[0]
			}
			return set(raw)
		}
		onEvent := func(kind string, raw json.RawMessage) error {
			if kind == "DELETED" {
				return set(nil)
			}
			return set(raw)
		}
		onError := func(err error) {
			if apierrors.IsNotFound(err) {
				// Not served (an older member, its CRD missing): it has none.
				_ = set(nil)
				return
			}
			w.mu.Lock()
			if !m.listed[x.index] {
				m.err = err
			}
			w.mu.Unlock()
		}
		go func() {
			if waitAnswered(ctx, gate) {
				x.res.follow(ctx, rc, 0, onList, onEvent, onError)
			}
		}()
	}
	return nil
}

// Poll reads the operator Deployment's version label (its metadata alone), and says whether
// what the summary shows changed. It asks nothing while the member's NodewrightCluster says
// the operator's version.
func (w *objectWatcher) Poll(ctx context.Context, name string, rc rest.Interface) pollResult {
	w.mu.Lock()
	m := w.members[name]
	published := m != nil && m.published() != ""
	w.mu.Unlock()
	switch {
	case m == nil:
		return pollResult{}
	case published:
		return pollResult{read: true}
	}
	// Only the labels are decoded: a real Deployment's metadata carries its managed fields.
	var d struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	raw, err := rc.Get().AbsPath(m.deployment).SetHeader("Accept", acceptMetadata).Do(ctx).Raw()
	var status apierrors.APIStatus
	answered := err == nil || errors.As(err, &status)
	if err == nil {
		err = json.Unmarshal(raw, &d)
	}
	switch {
	case apierrors.IsNotFound(err):
		d.Metadata.Labels = nil
	case err != nil:
		w.mu.Lock()
		if !m.listed[objDeployment] {
			m.err = err
		}
		w.mu.Unlock()
		// The member answered (not allowed, say): polled again with every PollInterval.
		// It did not (timed out, say): at its next check.
		return pollResult{read: answered, answered: answered, err: err}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.published() != "" {
		// Published while the Deployment was read: the NodewrightCluster's word stands.
		return pollResult{read: true, answered: true}
	}
	changed := !m.listed[objDeployment] || m.version != d.Metadata.Labels[versionLabel]
	m.version = d.Metadata.Labels[versionLabel]
	m.listed[objDeployment] = true
	return pollResult{changed: changed, read: true, answered: true}
}
