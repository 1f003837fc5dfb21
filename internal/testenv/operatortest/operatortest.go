// Package operatortest runs the operator in a test's control plane as it runs in a cluster,
// with its admission webhooks reached through the API server and an audit trail of its own.
//
// It lives apart from internal/testenv, which must not import internal/operator: the
// controllers' tests use testenv, and the operator imports the controllers.
package operatortest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

// The operator's namespace and the objects it keeps there.
const (
	Namespace = "nodewright-system"
	// CertSecret holds the webhooks' serving certificate the operator makes.
	CertSecret = "nodewright-webhook-cert"
	// ProfileKeys is the ConfigMap of the public keys EdgeProfiles are verified with.
	ProfileKeys = "nodewright-profile-keys"
	// AgentNamespace is the node agents' namespace the operator is told (--agent-namespace),
	// where a test that hands the cluster over runs their heartbeats.
	AgentNamespace = "nodewright-agent"
)

// Options are what a package's tests change in how the operator runs.
type Options struct {
	// TempPrefix starts the name of the temporary folder of the audit keys and trail.
	TempPrefix string
	// CheckpointInterval is how often the trail is checkpointed; a minute when zero.
	CheckpointInterval time.Duration
	// LegacyNamespace is the operator's --legacy-namespace: the only namespace it reads the
	// legacy objects in, and the only one a NodewrightCluster may name. Empty: every namespace.
	LegacyNamespace string
	// WithoutFlips runs no BondModeFlipPlan controller: the tests write the flips' status
	// themselves, as it would.
	WithoutFlips bool
	// WithoutVMOperations runs no VMOperationRequest controller: the tests run their own.
	WithoutVMOperations bool
}

// Operator is the operator Start runs.
type Operator struct {
	// TrailDir is the folder of the audit trail.
	TrailDir string
	// KeyFile and PublicKeyFile are the checkpoints' signing key and its public key (PEM).
	KeyFile, PublicKeyFile string
	// Options are the options it runs with.
	Options operator.Options
}

// Start runs the operator against env, which must have been made WithWebhooks, until env
// stops, and returns once the API server reaches its webhooks through the CA it wrote into
// their configurations. It makes the operator's namespace; the temporary folder is removed
// when env stops.
func Start(env *testenv.Env, o Options) (*Operator, error) {
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	dir, err := os.MkdirTemp("", o.TempPrefix)
	if err != nil {
		return nil, err
	}
	op := &Operator{TrailDir: filepath.Join(dir, "audit"), KeyFile: filepath.Join(dir, "audit.key"), PublicKeyFile: filepath.Join(dir, "audit.pub")}
	priv, pub, err := audit.GenerateKey()
	if err == nil {
		err = os.WriteFile(op.KeyFile, priv, 0o600)
	}
	if err == nil {
		err = os.WriteFile(op.PublicKeyFile, pub, 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	interval := o.CheckpointInterval
	if interval == 0 {
		interval = time.Minute
	}
	op.Options = operator.Options{
		WithoutFlips: o.WithoutFlips, WithoutVMOperations: o.WithoutVMOperations,
		MetricsAddr: "0", ProbeAddr: "0", ShutdownTimeout: 5 * time.Second, CopyImage: "nodewright-copy:test",
		ProfileKeys: Namespace + "/" + ProfileKeys, LegacyNamespace: o.LegacyNamespace, AgentNamespace: AgentNamespace,
		Audit: operator.AuditOptions{Dir: op.TrailDir, KeyFile: op.KeyFile, Actor: "system:serviceaccount:nodewright-system:nodewright-operator",
			CheckpointConfigMap: Namespace + "/nodewright-audit-checkpoint", CheckpointInterval: interval},
		Webhooks: operator.WebhookOptions{
			Enabled: true, Host: env.Webhooks.LocalServingHost, Port: env.Webhooks.LocalServingPort,
			CertMode: operator.CertModeSelf, Secret: Namespace + "/" + CertSecret, Service: Namespace + "/nodewright-webhook",
			ExtraHosts:            []string{env.Webhooks.LocalServingHost},
			MutatingConfiguration: "nodewright-mutating-webhook", ValidatingConfiguration: "nodewright-validating-webhook",
		},
	}
	mgr, err := operator.NewManager(ctx, env.Config, op.Options)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(runCtx); err != nil {
			fmt.Fprintf(os.Stderr, "the operator stopped: %v\n", err)
		}
	}()
	env.BeforeStop(func() {
		cancel()
		<-done
		_ = os.RemoveAll(dir)
	})
	// Ready once the API server reaches the webhooks through the CA the operator wrote: in
	// seconds, or minutes on a busy machine. The probe is admitted, or refused by the
	// validating webhook (the cluster is not Managed, say), which the mutating one reached
	// first.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := env.Client.Create(ctx, &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "active-backup"}},
			client.DryRunAll)
		if err == nil || WebhookRefused(err, "BondModeFlipPlan") {
			return op, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the API server cannot call the webhooks: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WebhookRefused reports whether err is the refusal of a request by Nodewright's validating
// webhook of kind: the API server reached it.
func WebhookRefused(err error, kind string) bool {
	return err != nil && strings.Contains(err.Error(), `admission webhook "v`+strings.ToLower(kind)+`-v1alpha1.nodewright.spectrocloud.com" denied the request`)
}
