package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/spectrocloud/nodewright/internal/webhook/certs"
)

// The webhook certificate modes.
const (
	// CertModeSelf: the operator keeps its own CA and serving certificate in a Secret and
	// writes the CA bundle into the webhook configurations. No cert-manager needed.
	CertModeSelf = "self"
	// CertModeFiles: another party (cert-manager, say) writes tls.crt and tls.key into the
	// certificate folder and the CA bundle into the configurations; the operator reloads the
	// files when they change.
	CertModeFiles = "files"
)

// WebhookOptions configure the admission webhooks.
type WebhookOptions struct {
	// Enabled serves the webhooks.
	Enabled bool
	// Host and Port the webhook server listens on.
	Host string
	Port int
	// CertMode is CertModeSelf or CertModeFiles.
	CertMode string
	// CertDir holds tls.crt and tls.key in CertModeFiles.
	CertDir string
	// Secret, namespace/name, keeps the CA and serving certificate in CertModeSelf.
	Secret string
	// Service, namespace/name, is the Service the API server reaches the webhooks at; the
	// serving certificate is valid for its DNS names.
	Service string
	// ExtraHosts are more DNS names or IP addresses for the certificate (a local site's
	// 127.0.0.1, say).
	ExtraHosts []string
	// MutatingConfiguration and ValidatingConfiguration name the webhook configurations
	// that receive the CA bundle in CertModeSelf.
	MutatingConfiguration, ValidatingConfiguration string
	// Lifetimes of the certificates in CertModeSelf; certs.DefaultLifetimes when zero.
	Lifetimes certs.Lifetimes
}

func (o *WebhookOptions) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "webhooks", true, "Serve the admission webhooks (defaulting, validation, requester stamping).")
	fs.StringVar(&o.Host, "webhook-host", "", "Address the webhook server listens on; empty: every address.")
	fs.IntVar(&o.Port, "webhook-port", 9443, "Port the webhook server listens on.")
	fs.StringVar(&o.CertMode, "webhook-cert-mode", CertModeSelf,
		"Who provides the webhook serving certificate: \"self\" (the operator keeps a CA and certificate in --webhook-secret and writes the CA bundle into the webhook configurations) or \"files\" (cert-manager or another tool writes tls.crt and tls.key into --webhook-cert-dir).")
	fs.StringVar(&o.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Folder with tls.crt and tls.key when --webhook-cert-mode=files.")
	fs.StringVar(&o.Secret, "webhook-secret", "nodewright-system/nodewright-webhook-cert", "namespace/name of the Secret that keeps the webhook CA and serving certificate when --webhook-cert-mode=self.")
	fs.StringVar(&o.Service, "webhook-service", "nodewright-system/nodewright-webhook", "namespace/name of the Service the API server calls the webhooks through; the certificate is valid for its DNS names.")
	fs.Func("webhook-cert-hosts", "Comma-separated extra DNS names or IP addresses the serving certificate is valid for.", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.ExtraHosts = append(o.ExtraHosts, h)
			}
		}
		return nil
	})
	fs.StringVar(&o.MutatingConfiguration, "webhook-mutating-configuration", "nodewright-mutating-webhook", "MutatingWebhookConfiguration that receives the CA bundle when --webhook-cert-mode=self.")
	fs.StringVar(&o.ValidatingConfiguration, "webhook-validating-configuration", "nodewright-validating-webhook", "ValidatingWebhookConfiguration that receives the CA bundle when --webhook-cert-mode=self.")
}

func (o *WebhookOptions) validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if o.Port <= 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--webhook-port %d: must be between 1 and 65535", o.Port))
	}
	switch o.CertMode {
	case CertModeSelf:
		if _, err := splitName(o.Secret); err != nil {
			errs = append(errs, fmt.Errorf("--webhook-secret: %w", err))
		}
		if _, err := splitName(o.Service); err != nil {
			errs = append(errs, fmt.Errorf("--webhook-service: %w", err))
		}
	case CertModeFiles:
		if o.CertDir == "" {
			errs = append(errs, errors.New("--webhook-cert-dir must not be empty when --webhook-cert-mode=files"))
		}
	default:
		errs = append(errs, fmt.Errorf("--webhook-cert-mode %q: want %q or %q", o.CertMode, CertModeSelf, CertModeFiles))
	}
	return errors.Join(errs...)
}

// splitName parses namespace/name.
func splitName(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q: want namespace/name", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// subject is what the serving certificate must cover: the Service's DNS names and the
// extra hosts.
func (o *WebhookOptions) subject() certs.Subject {
	var s certs.Subject
	if svc, err := splitName(o.Service); err == nil {
		base := svc.Name + "." + svc.Namespace + ".svc"
		s.DNSNames = append(s.DNSNames, base, base+".cluster.local")
	}
	for _, h := range o.ExtraHosts {
		if ip := net.ParseIP(h); ip != nil {
			s.IPs = append(s.IPs, ip)
		} else {
			s.DNSNames = append(s.DNSNames, h)
		}
	}
	return s
}

// webhookServer builds the webhook server and, in CertModeSelf, the rotator that gives it
// its certificate. The rotator is nil in CertModeFiles.
func (o *WebhookOptions) webhookServer() (webhook.Server, *certs.Rotator) {
	opts := webhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir}
	if o.CertMode != CertModeSelf {
		return webhook.NewServer(opts), nil
	}
	secret, _ := splitName(o.Secret)
	r := &certs.Rotator{
		Secret:             secret,
		Subject:            o.subject(),
		Lifetimes:          o.Lifetimes,
		MutatingWebhooks:   []string{o.MutatingConfiguration},
		ValidatingWebhooks: []string{o.ValidatingConfiguration},
	}
	opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = r.GetCertificate }}
	return webhook.NewServer(opts), r
}

// startRotator loads (or creates) the certificate before the manager starts, so that the
// webhook server never serves without one, and runs the rotator and the controller that
// puts back a CA bundle someone removed from a webhook configuration (an upgrade that
// re-applied the manifests, say).
func startRotator(ctx context.Context, mgr ctrl.Manager, r *certs.Rotator) error {
	c, err := client.NewWithWatch(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return err
	}
	r.Client, r.Reader, r.Watcher = c, c, c
	if err := r.Prepare(ctx); err != nil {
		return fmt.Errorf("preparing the webhook serving certificate: %w", err)
	}
	if err := mgr.Add(r); err != nil {
		return err
	}
	names := map[string]bool{}
	for _, n := range append(append([]string{}, r.MutatingWebhooks...), r.ValidatingWebhooks...) {
		names[n] = true
	}
	ours := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return names[o.GetName()] }))
	return ctrl.NewControllerManagedBy(mgr).
		Named("webhook-ca-bundle").
		For(&admissionregistrationv1.ValidatingWebhookConfiguration{}, ours).
		Watches(&admissionregistrationv1.MutatingWebhookConfiguration{}, &handler.EnqueueRequestForObject{}, ours).
		Complete(reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, r.Inject(ctx)
		}))
}
