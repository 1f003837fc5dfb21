package replicationupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	if s.lin, s.linErr, err = r.linstorClient(ctx, s.profile); err != nil {
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

// linstorConfig is how to reach LINSTOR: the profile's settings where it gives them, the
// operator's otherwise.
func (r *Reconciler) linstorConfig(p *nwv1.EdgeProfile) linstor.Config {
	cfg := r.LINSTOR
	if p == nil || p.Spec.Storage.LINSTOR == nil {
		return cfg
	}
	l := p.Spec.Storage.LINSTOR
	if l.URL != "" {
		cfg.URL = l.URL
		if l.ClientSecretRef == nil {
			// The operator's Secret belongs to the operator's URL.
			cfg.ClientSecret, cfg.CA, cfg.ClientCert, cfg.ClientKey = nil, nil, nil, nil
		}
	}
	if ref := l.ClientSecretRef; ref != nil {
		cfg.ClientSecret = &linstor.SecretRef{Namespace: ref.Namespace, Name: ref.Name}
		cfg.CA, cfg.ClientCert, cfg.ClientKey = nil, nil, nil
	}
	return cfg
}

// linstorClient is the client of the LINSTOR the upgrade talks to, made once per
// configuration (and client Secret version). A configuration that cannot be used gives no
// client and says why; only the API server's failures are errors.
func (r *Reconciler) linstorClient(ctx context.Context, p *nwv1.EdgeProfile) (*linstor.Client, string, error) {
	cfg := r.linstorConfig(p)
	if cfg.URL == "" {
		return nil, "no LINSTOR controller is configured: set the EdgeProfile's storage.linstor.url or the chart's linstor.url", nil
	}
	key := cfg.URL
	if ref := cfg.ClientSecret; ref != nil {
		secret := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return nil, fmt.Sprintf("LINSTOR client Secret %s/%s: %v", ref.Namespace, ref.Name, err), nil
		} else if err != nil {
			return nil, "", err
		}
		var err error
		if cfg, err = cfg.WithSecret(secret); err != nil {
			return nil, err.Error(), nil
		}
		key += "|" + ref.Namespace + "/" + ref.Name + "@" + secret.ResourceVersion
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.clients[key]; c != nil {
		return c, "", nil
	}
	c, err := linstor.New(cfg)
	if err != nil {
		var cerr *linstor.ConfigError
		if errors.As(err, &cerr) {
			return nil, err.Error(), nil
		}
		return nil, "", err
	}
	if r.clients == nil {
		r.clients = map[string]*linstor.Client{}
	}
	r.clients[key] = c
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
