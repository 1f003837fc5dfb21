package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/audit"
)

// The operator publishes its newest audit checkpoint in one ConfigMap of its namespace.
// +kubebuilder:rbac:groups="",namespace=nodewright-system,resources=configmaps,verbs=create
// +kubebuilder:rbac:groups="",namespace=nodewright-system,resources=configmaps,verbs=patch,resourceNames=nodewright-audit-checkpoint
// It learns the identity its records name with a SelfSubjectReview.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// CheckpointKey is the ConfigMap key that holds the newest checkpoint line, for
// `nodewright-audit verify --trusted-checkpoint`.
const CheckpointKey = "checkpoint.jsonl"

// WitnessedKey is the ConfigMap key that holds the newest checkpoint the trail's witness (the
// receiver it is shipped to, when that is a witness) countersigned and handed back, for the
// fleet hub and `nodewright-audit verify --witnessed-checkpoint`. The operator only relays it:
// it cannot make one, and the witness never countersigns a rewritten trail.
const WitnessedKey = "witnessed.jsonl"

// AuditOptions configure the audit trail.
type AuditOptions struct {
	// Dir holds the trail (JSON Lines files); empty: no trail, the records reach only the log.
	Dir string
	// KeyFile is the ed25519 private key (PKCS #8 PEM) that signs checkpoints, typically a
	// Secret mounted as a file.
	KeyFile string
	// Actor is who the records say acted; empty: the operator's own identity, as the API
	// server reports it.
	Actor string
	// CheckpointConfigMap, namespace/name, receives the newest checkpoint.
	CheckpointConfigMap string
	// CheckpointInterval bounds how long records stay unsigned.
	CheckpointInterval time.Duration
	// Stdout copies every line of the trail to standard output, for a log collector.
	Stdout bool
	// ShipURL, when set, is the HTTP(S) receiver the trail is shipped to; ShipCAFile and
	// ShipTokenFile hold its CA bundle and bearer token.
	ShipURL, ShipCAFile, ShipTokenFile string
}

func (o *AuditOptions) validate() error {
	var errs []error
	if o.Dir == "" {
		if o.ShipURL != "" {
			errs = append(errs, errors.New("--audit-ship-url needs --audit-dir: the trail is shipped from its files"))
		}
		if o.Stdout {
			errs = append(errs, errors.New("--audit-stdout needs --audit-dir: the copy on standard output is of the trail kept there"))
		}
		return errors.Join(errs...)
	}
	if o.KeyFile == "" {
		errs = append(errs, errors.New("--audit-dir needs --audit-key-file: checkpoints are signed"))
	}
	if ns, name, ok := strings.Cut(o.CheckpointConfigMap, "/"); !ok || ns == "" || name == "" {
		errs = append(errs, fmt.Errorf("--audit-checkpoint-configmap %q: want namespace/name", o.CheckpointConfigMap))
	}
	if o.CheckpointInterval <= 0 {
		errs = append(errs, fmt.Errorf("--audit-checkpoint-interval %s: must be positive", o.CheckpointInterval))
	}
	if len(o.Actor) > MaxAuditActorBytes {
		errs = append(errs, fmt.Errorf("--audit-actor: %d bytes, at most %d: every record carries it, and records are cut to fit a line of the trail around it", len(o.Actor), MaxAuditActorBytes))
	}
	return errors.Join(errs...)
}

// MaxAuditActorBytes bounds the name every record of the operator carries. A record's
// message and details are cut to fit a line of the trail; its actor is not, so an actor
// without a bound could leave every record out.
const MaxAuditActorBytes = 1 << 10

// auditTrail is the operator's audit log. It opens only once this replica leads (two
// replicas must never append to one chain), so the controllers are given the trail itself,
// whose Append waits until the log is open.
type auditTrail struct {
	opts  AuditOptions
	actor string
	cfg   *rest.Config
	c     client.Client

	ready   chan struct{}
	log     *audit.Log
	openErr error
	closed  atomic.Bool

	mu        sync.Mutex
	latest    []byte // the newest checkpoint line
	latestSeq uint64
	witnessed []byte // the newest witnessed checkpoint line
	wake      chan struct{}
}

func newAuditTrail(cfg *rest.Config, c client.Client, opts AuditOptions) (*auditTrail, error) {
	t := &auditTrail{opts: opts, cfg: cfg, c: c, ready: make(chan struct{}), wake: make(chan struct{}, 1)}
	t.actor = opts.Actor
	if t.actor == "" {
		who, err := whoAmI(cfg)
		if err != nil {
			return nil, fmt.Errorf("learning the operator's identity for the audit trail (or set --audit-actor): %w", err)
		}
		if len(who) > MaxAuditActorBytes {
			return nil, fmt.Errorf("the operator's identity for the audit trail is %d bytes, at most %d: set --audit-actor", len(who), MaxAuditActorBytes)
		}
		t.actor = who
	}
	return t, nil
}

// whoAmI asks the API server who this client is.
func whoAmI(cfg *rest.Config) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return review.Status.UserInfo.Username, nil
}

// Append waits until the log is open, then appends.
func (t *auditTrail) Append(ctx context.Context, records ...audit.Record) ([]audit.Appended, error) {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if t.openErr != nil {
		return nil, t.openErr
	}
	return t.log.Append(ctx, records...)
}

// Ready reports, without waiting, whether the trail is open on this replica.
func (t *auditTrail) Ready() bool {
	select {
	case <-t.ready:
		return t.openErr == nil && !t.closed.Load()
	default:
		return false
	}
}

// Holding is a readiness check, when the operator keeps a trail: a replica serves admission
// only while it holds the trail, so that every admission decision is recorded. Standby
// replicas are not ready, and the webhook Service sends requests to the leader alone.
func (t *auditTrail) Holding(*http.Request) error {
	if !t.Ready() {
		return errors.New("this replica does not hold the audit trail (it is not the leader, or the trail is not open)")
	}
	return nil
}

// NeedLeaderElection: only the leader writes the trail.
func (t *auditTrail) NeedLeaderElection() bool { return true }

// Start opens the trail, publishes each checkpoint until ctx ends, then closes the log,
// which writes a last checkpoint.
func (t *auditTrail) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("audit")
	err := t.open()
	t.openErr = err
	close(t.ready)
	if err != nil {
		return err
	}
	log.Info("The audit trail is open", "dir", t.opts.Dir, "actor", t.actor)
	for {
		select {
		case <-ctx.Done():
			t.closed.Store(true)
			closeErr := t.log.Close()
			// The last checkpoint was written on Close: publish it too.
			publishCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return errors.Join(closeErr, t.publish(publishCtx))
		case <-t.wake:
			if err := t.publish(ctx); err != nil && ctx.Err() == nil {
				log.Error(err, "Publishing the audit checkpoint failed; the next one retries", "configMap", t.opts.CheckpointConfigMap)
			}
		}
	}
}

func (t *auditTrail) open() error {
	pem, err := os.ReadFile(t.opts.KeyFile)
	if err != nil {
		return fmt.Errorf("--audit-key-file: %w", err)
	}
	signer, err := audit.LoadSigner(pem)
	if err != nil {
		return fmt.Errorf("--audit-key-file %s: %w", t.opts.KeyFile, err)
	}
	if err := os.MkdirAll(t.opts.Dir, 0o700); err != nil {
		return fmt.Errorf("--audit-dir: %w", err)
	}
	sink, err := audit.OpenFileSink(t.opts.Dir, audit.FileSinkOptions{})
	if err != nil {
		return fmt.Errorf("opening the audit trail in %s: %w", filepath.Clean(t.opts.Dir), err)
	}
	var out audit.Sink = sink
	if t.opts.Stdout {
		log := ctrl.Log.WithName("audit")
		out = audit.Tee(sink, func(err error) {
			log.Error(err, "Copying the audit trail to standard output failed; the trail keeps the records")
		}, audit.NewWriterSink(os.Stdout))
	}
	t.log = audit.NewLog(out, signer, sink.State(), audit.LogOptions{
		CheckpointInterval: t.opts.CheckpointInterval,
		OnCheckpoint:       t.offer,
	})
	return nil
}

// offer keeps the newest checkpoint line and wakes the publisher; it never blocks the log.
func (t *auditTrail) offer(line []byte) {
	var seq uint64
	if e, err := audit.ParseLine(line); err == nil {
		seq = e.Seq
	}
	t.mu.Lock()
	if t.latest == nil || seq >= t.latestSeq {
		t.latest, t.latestSeq = line, seq
	}
	t.mu.Unlock()
	t.wakePublisher()
}

// offerWitnessed keeps the newest witnessed checkpoint the shipper was handed back, and wakes
// the publisher. The witness may hand back a checkpoint before the log's own hook published
// it: the published checkpoint is then that one, so that it is never behind the witnessed one.
func (t *auditTrail) offerWitnessed(w *audit.Witnessed) {
	t.mu.Lock()
	t.witnessed = bytes.Clone(w.Line())
	if t.latest == nil || w.Entry.Seq > t.latestSeq {
		t.latest, t.latestSeq = bytes.Clone(w.Entry.Line()), w.Entry.Seq
	}
	t.mu.Unlock()
	t.wakePublisher()
}

func (t *auditTrail) wakePublisher() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// publish writes the newest checkpoint, and the newest witnessed one, into the ConfigMap.
func (t *auditTrail) publish(ctx context.Context) error {
	t.mu.Lock()
	line, witnessed := t.latest, t.witnessed
	t.mu.Unlock()
	if line == nil {
		return nil
	}
	ns, name, _ := strings.Cut(t.opts.CheckpointConfigMap, "/")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "nodewright"}}}
	cm.Data = map[string]string{CheckpointKey: string(line) + "\n"}
	if witnessed != nil {
		cm.Data[WitnessedKey] = string(witnessed) + "\n"
	}
	err := t.c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		patch := client.MergeFrom(&corev1.ConfigMap{ObjectMeta: cm.ObjectMeta})
		err = t.c.Patch(ctx, cm, patch)
	}
	return err
}

// shipper ships the trail to an HTTP(S) receiver, if one is configured.
func (t *auditTrail) shipper() (*audit.Shipper, error) {
	if t.opts.ShipURL == "" {
		return nil, nil
	}
	opts := audit.ShipperOptions{URL: t.opts.ShipURL, OnWitnessed: t.offerWitnessed}
	if t.opts.ShipCAFile != "" {
		ca, err := os.ReadFile(t.opts.ShipCAFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-ship-ca-file: %w", err)
		}
		opts.CA = ca
	}
	if t.opts.ShipTokenFile != "" {
		token, err := os.ReadFile(t.opts.ShipTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-ship-token-file: %w", err)
		}
		opts.BearerToken = strings.TrimSpace(string(token))
	}
	return audit.NewShipper(t.opts.Dir, opts)
}
