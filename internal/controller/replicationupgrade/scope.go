package replicationupgrade

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/internal/replupgrade"
	"github.com/spectrocloud/nodewright/internal/workflow/engine"
)

// scope is one reconcile's view of an upgrade.
type scope struct {
	*engine.Run[*nwv1.ReplicationUpgrade]
	u       *nwv1.ReplicationUpgrade
	profile *nwv1.EdgeProfile
	// lin is the LINSTOR client, nil when it cannot be made (linErr says why).
	lin    *linstor.Client
	linErr string
	// ops are the upgrade's NodeOperations, by name.
	ops map[string]*nwv1.NodeOperation
}

func (r *Reconciler) newScope(ctx context.Context, run *engine.Run[*nwv1.ReplicationUpgrade]) (*scope, error) {
	u := run.Object
	s := &scope{Run: run, u: u, ops: map[string]*nwv1.NodeOperation{}}
	var err error
	if s.profile, err = engine.ProfileInForce(ctx, r.Client); err != nil {
		return nil, err
	}
	if s.lin, s.linErr, err = r.linstorClient(); err != nil {
		return nil, err
	}
	if r.AgentNamespace != "" {
		var ops nwv1.NodeOperationList
		if err := r.Client.List(ctx, &ops, client.InNamespace(r.AgentNamespace), client.MatchingLabels{replupgrade.LabelUID: string(u.UID)}); err != nil {
			return nil, err
		}
		for i := range ops.Items {
			s.ops[ops.Items[i].Name] = &ops.Items[i]
		}
	}
	return s, nil
}

// linstorClient is the client of the LINSTOR gate the upgrade talks to LINSTOR through, made
// once per configuration. The operator holds no LINSTOR credential: the gate
// (nodewright-linstor-gate) does, and forwards only what an upgrade asks of LINSTOR. Where
// LINSTOR is comes from the gate's own flags; the EdgeProfile's storage.linstor.url and
// clientSecretRef are checked against them at the Preflight (checkGateUpstream). A
// configuration that cannot be used gives no client and says why.
func (r *Reconciler) linstorClient() (*linstor.Client, string, error) {
	cfg := r.LINSTOR
	if cfg.URL == "" {
		return nil, "no LINSTOR gate is configured: set the chart's linstor.url, which runs nodewright-linstor-gate in front of LINSTOR and gives the operator --linstor-gate-url", nil
	}
	// The CA of the gate's certificate is read at each reconcile: a renewed one (the kubelet
	// updates the mounted ConfigMap in place) makes a new client.
	if cfg.CAFile != "" {
		ca, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Sprintf("the CA of the LINSTOR gate's certificate: %v", err), nil
		}
		cfg.CA, cfg.CAFile = ca, ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil && bytes.Equal(r.clientCA, cfg.CA) {
		return r.client, "", nil
	}
	c, err := linstor.New(cfg)
	if err != nil {
		var cerr *linstor.ConfigError
		if errors.As(err, &cerr) {
			return nil, err.Error(), nil
		}
		return nil, "", err
	}
	r.client, r.clientCA = c, cfg.CA
	return c, "", nil
}

// undo is the status' undo record, made when missing.
func (s *scope) undo() *nwv1.ReplicationUndo {
	if s.u.Status.Undo == nil {
		s.u.Status.Undo = &nwv1.ReplicationUndo{}
	}
	return s.u.Status.Undo
}

// joining are the nodes that join: the data nodes and the tiebreaker.
func (s *scope) joining() []string { return s.u.Spec.PeerNodes }

// isJoining reports whether node joins.
func (s *scope) isJoining(node string) bool { return slices.Contains(s.u.Spec.PeerNodes, node) }

// volumes are the status' volume counts, made when missing.
func (s *scope) volumes() *nwv1.ReplicationVolumeCounts {
	if s.u.Status.Volumes == nil {
		s.u.Status.Volumes = &nwv1.ReplicationVolumeCounts{}
	}
	return s.u.Status.Volumes
}

// propChange is the status' record of a property change as LINSTOR's.
func propChange(c *nwv1.PropertyChange) linstor.PropChange {
	if c == nil {
		return linstor.PropChange{}
	}
	return linstor.PropChange{Set: c.Set, Delete: c.Delete}
}

// refused reports whether err is one retrying cannot mend: refused here, or refused by LINSTOR
// as invalid (not a timeout, a missing answer or a server failure).
func refused(err error) bool {
	if errors.Is(err, linstor.ErrRefused) {
		return true
	}
	var lerr *linstor.Error
	return errors.As(err, &lerr) && lerr.Status >= 400 && lerr.Status < 500 && lerr.Status != 404 && lerr.Status != 408 && lerr.Status != 429
}
