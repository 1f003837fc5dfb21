package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",namespace=nodewright-system,resources=secrets,verbs=get;watch;update,resourceNames=nodewright-webhook-cert
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=update,resourceNames=nodewright-mutating-webhook;nodewright-validating-webhook

// Rotator keeps the webhook serving certificate in its Secret valid, serves it from memory,
// and writes the CA bundle into the webhook configurations. It runs on every replica, since
// every replica serves the webhooks.
type Rotator struct {
	// Client writes the Secret and the webhook configurations.
	Client client.Client
	// Reader reads them from the API server; the Secret is not cached.
	Reader client.Reader
	// Secret is where the CA and the serving certificate are kept.
	Secret types.NamespacedName
	// Subject is what the serving certificate must be valid for.
	Subject Subject
	// Lifetimes of the certificates; DefaultLifetimes when zero.
	Lifetimes Lifetimes
	// ValidatingWebhooks and MutatingWebhooks name the configurations that get the CA bundle.
	ValidatingWebhooks, MutatingWebhooks []string
	// Watcher, when set, watches the Secret, so that a replica serves what another one
	// renewed as soon as it is written.
	Watcher client.WithWatch
	// Clock is the real clock unless a test sets another.
	Clock clock.Clock

	current  atomic.Pointer[tls.Certificate]
	bundle   atomic.Pointer[[]byte]
	injected atomic.Bool
}

// Injected is a readiness check: it passes once the CA bundle was written into the webhook
// configurations, so that the API server trusts this replica's certificate.
func (r *Rotator) Injected(*http.Request) error {
	if !r.injected.Load() {
		return errors.New("the webhook CA bundle is not yet written into the webhook configurations")
	}
	return nil
}

func (r *Rotator) lifetimes() Lifetimes {
	if r.Lifetimes.CA == 0 {
		return DefaultLifetimes
	}
	return r.Lifetimes
}

func (r *Rotator) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// GetCertificate serves the certificate read last; it is a tls.Config's GetCertificate.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no webhook serving certificate yet")
}

// CABundle is the PEM bundle the webhook configurations should trust.
func (r *Rotator) CABundle() []byte {
	if b := r.bundle.Load(); b != nil {
		return *b
	}
	return nil
}

// Ensure makes the Secret hold a bundle that is not due, creating or renewing it as needed,
// and returns it, when it is due next, and the Secret's resourceVersion.
func (r *Rotator) Ensure(ctx context.Context) (Bundle, time.Time, string, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("secret", r.Secret)
	life := r.lifetimes()
	// A conflict means another replica wrote the Secret meanwhile: read what it wrote.
	for attempt := 0; attempt < 5; attempt++ {
		now := r.clock().Now()
		secret := &corev1.Secret{}
		err := r.Reader.Get(ctx, r.Secret, secret)
		if apierrors.IsNotFound(err) {
			b, err := Bundle{}.Renew(now, r.Subject, life)
			if err != nil {
				return Bundle{}, time.Time{}, "", err
			}
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: r.Secret.Namespace, Name: r.Secret.Name,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "nodewright-operator"}},
				Type: corev1.SecretTypeOpaque,
				Data: b.Data(),
			}
			if err := r.Client.Create(ctx, secret); apierrors.IsAlreadyExists(err) {
				continue
			} else if apierrors.IsForbidden(err) {
				// The chart's role may not create Secrets: the chart creates this one.
				return Bundle{}, time.Time{}, "", fmt.Errorf("the webhook certificate Secret %s is missing and the operator may not create it (the Helm chart creates it: helm upgrade with the same values puts it back): %w", r.Secret, err)
			} else if apierrors.IsNotFound(err) {
				// Only the namespace can be missing when an object is created.
				ns := r.Secret.Namespace
				return Bundle{}, time.Time{}, "", fmt.Errorf("the namespace %s of the webhook certificate Secret %s does not exist: create it (kubectl create namespace %s), "+
					"or name a Secret and Service in another namespace (--webhook-secret, --webhook-service), or run without admission (--webhooks=false): %w", ns, r.Secret, ns, err)
			} else if err != nil {
				return Bundle{}, time.Time{}, "", fmt.Errorf("creating the webhook certificate Secret %s: %w", r.Secret, err)
			}
			log.Info("Created the webhook CA and serving certificate")
			continue
		}
		if err != nil {
			return Bundle{}, time.Time{}, "", fmt.Errorf("reading the webhook certificate Secret %s: %w", r.Secret, err)
		}
		b := FromData(secret.Data)
		due, why, next := b.Due(now, r.Subject, life)
		if due {
			renewed, err := b.Renew(now, r.Subject, life)
			if err != nil {
				return Bundle{}, time.Time{}, "", err
			}
			secret.Data = renewed.Data()
			if err := r.Client.Update(ctx, secret); apierrors.IsConflict(err) {
				continue
			} else if err != nil {
				return Bundle{}, time.Time{}, "", fmt.Errorf("renewing the webhook certificate in Secret %s: %w", r.Secret, err)
			}
			log.Info("Renewed the webhook serving certificate", "because", why)
			continue
		}
		return b, next, secret.ResourceVersion, nil
	}
	return Bundle{}, time.Time{}, "", fmt.Errorf("the webhook certificate Secret %s kept changing while it was being renewed", r.Secret)
}

// Prepare ensures the Secret and serves its certificate, before the webhook server starts.
// Configurations that do not exist yet (installed after the operator) are not an error: the
// certificate is served, and Start writes the CA bundle into them once they do.
func (r *Rotator) Prepare(ctx context.Context) error {
	b, _, _, err := r.Ensure(ctx)
	if err != nil {
		return err
	}
	if err := r.serve(ctx, b); err != nil {
		if r.current.Load() == nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("The webhook CA bundle is not written yet; retrying", "reason", err.Error())
	}
	return nil
}

// serve makes b's certificate the one served. When b brings a CA bundle other than the one
// served so far, the bundle is written into the webhook configurations first, so that the API
// server trusts the new certificate before it is presented; if that fails, the old
// certificate (which the configurations still trust) is kept, unless there is none yet.
func (r *Rotator) serve(ctx context.Context, b Bundle) error {
	cert, err := b.Certificate()
	if err != nil {
		return err
	}
	injectErr := r.injectBundle(ctx, b.CABundle)
	if injectErr != nil && r.current.Load() != nil && !bytes.Equal(r.CABundle(), b.CABundle) {
		return fmt.Errorf("keeping the current certificate until its successor's CA is trusted: %w", injectErr)
	}
	r.current.Store(cert)
	bundle := b.CABundle
	r.bundle.Store(&bundle)
	r.injected.Store(injectErr == nil)
	return injectErr
}

// Inject writes the CA bundle the Secret holds into the webhook configurations, where it
// differs. It reads the Secret rather than what this replica serves, so that a replica
// that has not yet seen a change never writes back an older CA.
func (r *Rotator) Inject(ctx context.Context) error {
	secret := &corev1.Secret{}
	if err := r.Reader.Get(ctx, r.Secret, secret); err != nil {
		return fmt.Errorf("reading the webhook certificate Secret %s: %w", r.Secret, err)
	}
	bundle := secret.Data[KeyCABundle]
	if len(bundle) == 0 {
		return fmt.Errorf("the webhook certificate Secret %s holds no %s", r.Secret, KeyCABundle)
	}
	if err := r.injectBundle(ctx, bundle); err != nil {
		return err
	}
	if bytes.Equal(bundle, r.CABundle()) {
		r.injected.Store(true)
	}
	return nil
}

// injectBundle writes bundle into every webhook of the configurations, where it differs.
func (r *Rotator) injectBundle(ctx context.Context, bundle []byte) error {
	var errs []error
	for _, name := range r.ValidatingWebhooks {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		errs = append(errs, r.inject(ctx, cfg, "ValidatingWebhookConfiguration", name, bundle, func() []*admissionregistrationv1.WebhookClientConfig {
			out := make([]*admissionregistrationv1.WebhookClientConfig, len(cfg.Webhooks))
			for i := range cfg.Webhooks {
				out[i] = &cfg.Webhooks[i].ClientConfig
			}
			return out
		}))
	}
	for _, name := range r.MutatingWebhooks {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		errs = append(errs, r.inject(ctx, cfg, "MutatingWebhookConfiguration", name, bundle, func() []*admissionregistrationv1.WebhookClientConfig {
			out := make([]*admissionregistrationv1.WebhookClientConfig, len(cfg.Webhooks))
			for i := range cfg.Webhooks {
				out[i] = &cfg.Webhooks[i].ClientConfig
			}
			return out
		}))
	}
	return errors.Join(errs...)
}

// inject reads the configuration cfg named name, sets bundle in each of its webhooks'
// client configs, and writes it back when that changed something.
func (r *Rotator) inject(ctx context.Context, cfg client.Object, kind, name string, bundle []byte,
	clientConfigs func() []*admissionregistrationv1.WebhookClientConfig) error {
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: name}, cfg); err != nil {
		return fmt.Errorf("reading %s %s to write its CA bundle: %w", kind, name, err)
	}
	changed := false
	for _, cc := range clientConfigs() {
		changed = setBundle(cc, bundle) || changed
	}
	if !changed {
		return nil
	}
	// Update carries the resourceVersion read: a configuration changed meanwhile is read
	// again on the next pass rather than overwritten.
	if err := r.Client.Update(ctx, cfg); err != nil {
		return fmt.Errorf("writing the CA bundle into %s %s: %w", kind, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Wrote the webhook CA bundle", "kind", kind, "name", name)
	return nil
}

func setBundle(cc *admissionregistrationv1.WebhookClientConfig, bundle []byte) bool {
	if bytes.Equal(cc.CABundle, bundle) {
		return false
	}
	cc.CABundle = bundle
	return true
}

// Start keeps the certificate fresh until ctx ends: it ensures and serves, then waits until
// the certificate is next due or the Secret changes (another replica renewed it, or someone
// deleted it), retrying failures with a growing pause.
func (r *Rotator) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("webhook-certs")
	ctx = ctrl.LoggerInto(ctx, log)
	retry := time.Second
	for {
		b, next, rv, err := r.Ensure(ctx)
		if err == nil {
			err = r.serve(ctx, b)
		}
		wait := next.Sub(r.clock().Now())
		if err != nil {
			log.Error(err, "Keeping the webhook certificate fresh failed; retrying", "in", retry)
			wait, retry = retry, min(2*retry, time.Minute)
		} else {
			retry = time.Second
		}
		changed, stop := r.watchSecret(ctx, rv)
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-r.clock().After(wait):
		case <-changed:
		}
		stop()
	}
}

// watchSecret returns a channel that receives when the Secret changes after resourceVersion
// rv, and a function that stops watching. Without a Watcher, or when the watch cannot be
// made, the channel never receives and the due time alone wakes the rotator.
func (r *Rotator) watchSecret(ctx context.Context, rv string) (<-chan struct{}, func()) {
	changed := make(chan struct{}, 1)
	if r.Watcher == nil || rv == "" {
		return changed, func() {}
	}
	w, err := r.Watcher.Watch(ctx, &corev1.SecretList{}, client.InNamespace(r.Secret.Namespace),
		client.MatchingFields{"metadata.name": r.Secret.Name}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Watching the webhook certificate Secret failed; relying on its due time")
		return changed, func() {}
	}
	go func() {
		for range w.ResultChan() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	return changed, w.Stop
}

// NeedLeaderElection is false: every replica serves webhooks and needs the certificate.
func (r *Rotator) NeedLeaderElection() bool { return false }
