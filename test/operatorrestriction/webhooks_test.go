package operatorrestriction_test

import (
	"bytes"
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/webhook/certs"
)

// TestOperatorChangesOnlyItsCABundle: as the operator's ServiceAccount, the webhook
// certificate rotator (internal/webhook/certs, as the operator runs it in webhook.certMode
// self) fills in the chart's Secret and writes its CA bundle into the chart's two webhook
// configurations, and writes it back after someone removed it; changing anything else of a
// webhook (its URL, Service, rules, failure policy, selectors, timeout), adding or removing one,
// or changing the configurations' metadata is refused naming the field, a CA bundle change
// included; RBAC refuses touching another configuration, creating, patching or deleting one,
// and deleting the policies' bindings (which no admission policy can guard); and with RBAC
// widened to allow those writes of webhook configurations, the policy still refuses them.
func TestOperatorChangesOnlyItsCABundle(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	rotator := &certs.Rotator{
		Client: s.operator, Reader: s.operator,
		Secret:             types.NamespacedName{Namespace: s.release, Name: certSecret},
		Subject:            certs.Subject{DNSNames: []string{"nodewright-webhook." + s.release + ".svc"}},
		MutatingWebhooks:   []string{mutatingConfig},
		ValidatingWebhooks: []string{validatingConfig},
	}

	t.Run("the rotator writes its CA bundle", func(t *testing.T) {
		if err := rotator.Prepare(ctx); err != nil {
			t.Fatalf("the rotator, as the operator: %v", err)
		}
		if err := rotator.Injected(nil); err != nil {
			t.Fatal(err)
		}
		bundle := s.secretBundle(t)
		s.wantBundle(t, bundle)

		// Someone re-applies a configuration without the bundle (a chart upgrade, say): the
		// operator's controller writes it back (Inject).
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
			t.Fatal(err)
		}
		for i := range cfg.Webhooks {
			cfg.Webhooks[i].ClientConfig.CABundle = nil
		}
		if err := env.Client.Update(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if err := rotator.Inject(ctx); err != nil {
			t.Fatalf("writing the CA bundle back, as the operator: %v", err)
		}
		s.wantBundle(t, bundle)
	})

	validating := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration)) func() error {
		return func() error {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := s.operator.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
				return err
			}
			change(cfg)
			return s.operator.Update(ctx, cfg)
		}
	}
	mutating := func(change func(*admissionregistrationv1.MutatingWebhookConfiguration)) func() error {
		return func() error {
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := s.operator.Get(ctx, client.ObjectKey{Name: mutatingConfig}, cfg); err != nil {
				return err
			}
			change(cfg)
			return s.operator.Update(ctx, cfg)
		}
	}
	first := func() string {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Webhooks[0].Name
	}()
	firstMutating := func() string {
		cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: mutatingConfig}, cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Webhooks[0].Name
	}()
	const onlyCABundle = " may not change: the operator may change only the webhooks' clientConfig.caBundle of "

	t.Run("changing anything but the CA bundle is refused", func(t *testing.T) {
		before := s.versions(t)
		for _, tc := range []struct {
			what   string
			update func() error
			rule   string
		}{
			{"pointing a webhook at a URL", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service = nil
				c.Webhooks[0].ClientConfig.URL = ptr.To("https://collector.example.com/")
			}), "webhooks[" + first + "].clientConfig.url, webhooks[" + first + "].clientConfig.service" + onlyCABundle + validatingConfig},
			{"pointing a webhook at another Service", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.Service = &admissionregistrationv1.ServiceReference{
					Namespace: s.vms, Name: "collector", Path: ptr.To("/validate"), Port: ptr.To[int32](443)}
			}), "webhooks[" + first + "].clientConfig.service" + onlyCABundle + validatingConfig},
			{"another path", mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				if svc := c.Webhooks[0].ClientConfig.Service; svc != nil {
					svc.Path = ptr.To("/mutate-everything")
				}
			}), "webhooks[" + firstMutating + "].clientConfig.service" + onlyCABundle + mutatingConfig},
			{"widening a webhook's rules to pods", mutating(func(c *admissionregistrationv1.MutatingWebhookConfiguration) {
				c.Webhooks[0].Rules = append(c.Webhooks[0].Rules, admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				})
			}), "webhooks[" + firstMutating + "].rules" + onlyCABundle + mutatingConfig},
			{"failurePolicy Ignore", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}), "webhooks[" + first + "].failurePolicy" + onlyCABundle + validatingConfig},
			{"a namespace selector", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}}
			}), "webhooks[" + first + "].namespaceSelector" + onlyCABundle + validatingConfig},
			{"another timeout", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].TimeoutSeconds = ptr.To[int32](1)
			}), "webhooks[" + first + "].timeoutSeconds" + onlyCABundle + validatingConfig},
			{"a CA bundle with another rule", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\n")
				c.Webhooks[0].MatchPolicy = ptr.To(admissionregistrationv1.Exact)
			}), "webhooks[" + first + "].matchPolicy" + onlyCABundle + validatingConfig},
			{"removing a webhook", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Webhooks = c.Webhooks[1:]
			}), "webhooks may not be added or removed (added: [], removed: [" + first + "])"},
			{"adding a webhook", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				extra := *c.Webhooks[0].DeepCopy()
				extra.Name = "everything.example.com"
				c.Webhooks = append(c.Webhooks, extra)
			}), "webhooks may not be added or removed (added: [everything.example.com], removed: [])"},
			{"a label", validating(func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
				c.Labels["example.com/touched"] = "yes"
			}), "metadata.labels may not change: the operator may change only the webhooks' clientConfig.caBundle of " + validatingConfig},
		} {
			wantPolicyRefusal(t, tc.what, tc.update(), webhooksPolicy, tc.rule)
		}
		if after := s.versions(t); after != before {
			t.Errorf("the webhook configurations changed under the refused updates: resource versions %v, then %v", before, after)
		}
	})

	// Someone else's webhook configuration; its rule matches nothing that exists.
	other := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "vwidget.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://widgets.example.com/validate")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteIgnoringNotFound(t, other) })
	takeOver := func() error {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := s.operator.Get(ctx, client.ObjectKeyFromObject(other), cfg); err != nil {
			return err
		}
		cfg.Webhooks[0].ClientConfig.CABundle = rotator.CABundle()
		return s.operator.Update(ctx, cfg)
	}
	create := func() error {
		cfg := other.DeepCopy()
		cfg.ObjectMeta = metav1.ObjectMeta{Name: "nodewright-extra-webhook"}
		return s.operator.Create(ctx, cfg)
	}
	deleteOwn := func() error {
		return s.operator.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutatingConfig}})
	}
	// A merge patch of the CA bundle alone: admission sees a patch as an update.
	patchBundle := func() error {
		cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := s.operator.Get(ctx, client.ObjectKey{Name: validatingConfig}, cfg); err != nil {
			return err
		}
		before := cfg.DeepCopy()
		cfg.Webhooks[0].ClientConfig.CABundle = append(bytes.Clone(cfg.Webhooks[0].ClientConfig.CABundle), '\n')
		return s.operator.Patch(ctx, cfg, client.MergeFrom(before))
	}

	t.Run("RBAC refuses another configuration, and creating, patching or deleting one", func(t *testing.T) {
		wantRBACRefusal(t, "updating "+other.Name, takeOver(), "update", "validatingwebhookconfigurations")
		wantRBACRefusal(t, "creating a webhook configuration", create(), "create", "validatingwebhookconfigurations")
		wantRBACRefusal(t, "deleting "+mutatingConfig, deleteOwn(), "delete", "mutatingwebhookconfigurations")
		wantRBACRefusal(t, "patching "+validatingConfig, patchBundle(), "patch", "validatingwebhookconfigurations")
		// The API server never applies admission policies to policies and their bindings:
		// RBAC alone keeps the operator from removing them.
		for _, name := range []string{jobsPolicy, webhooksPolicy} {
			err := s.operator.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
			wantRBACRefusal(t, "deleting the binding "+name, err, "delete", "validatingadmissionpolicybindings")
		}
	})

	t.Run("with RBAC widened, the policy still refuses them", func(t *testing.T) {
		s.grant(t, []rbacv1.PolicyRule{{
			APIGroups: []string{admissionregistrationv1.GroupName},
			Resources: []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"},
			Verbs:     []string{"create", "update", "patch", "delete"},
		}}, authorizationv1.ResourceAttributes{Group: admissionregistrationv1.GroupName, Resource: "mutatingwebhookconfigurations", Verb: "delete"})
		const only = "the operator may only update its own webhook configurations (MutatingWebhookConfiguration nodewright-mutating-webhook, ValidatingWebhookConfiguration nodewright-validating-webhook): refused "
		wantPolicyRefusal(t, "updating "+other.Name, takeOver(), webhooksPolicy, only+"UPDATE of validatingwebhookconfigurations "+other.Name)
		wantPolicyRefusal(t, "creating a webhook configuration", create(), webhooksPolicy, only+"CREATE of validatingwebhookconfigurations nodewright-extra-webhook")
		wantPolicyRefusal(t, "deleting "+mutatingConfig, deleteOwn(), webhooksPolicy, only+"DELETE of mutatingwebhookconfigurations "+mutatingConfig)
		// What RBAC refused above but the policy allows: the CA bundle alone, patched.
		if err := patchBundle(); err != nil {
			t.Errorf("patching the CA bundle of %s alone: %v", validatingConfig, err)
		}
	})
}

// secretBundle is the CA bundle the webhook Secret holds.
func (s *site) secretBundle(t *testing.T) []byte {
	t.Helper()
	secret := &corev1.Secret{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.release, Name: certSecret}, secret); err != nil {
		t.Fatal(err)
	}
	bundle := secret.Data[certs.KeyCABundle]
	if len(bundle) == 0 {
		t.Fatalf("Secret %s holds no %s after the rotator ran", certSecret, certs.KeyCABundle)
	}
	return bundle
}

// wantBundle checks, as the administrator reads them, that every webhook of both
// configurations trusts bundle.
func (s *site) wantBundle(t *testing.T, bundle []byte) {
	t.Helper()
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: validatingConfig}, v); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: mutatingConfig}, m); err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			t.Errorf("webhook %s of %s does not hold the Secret's CA bundle", w.Name, validatingConfig)
		}
	}
	for _, w := range m.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			t.Errorf("webhook %s of %s does not hold the Secret's CA bundle", w.Name, mutatingConfig)
		}
	}
	if len(v.Webhooks) == 0 || len(m.Webhooks) == 0 {
		t.Fatalf("the configurations have %d and %d webhooks: nothing was checked", len(v.Webhooks), len(m.Webhooks))
	}
}

// versions are the resource versions of the two webhook configurations.
func (s *site) versions(t *testing.T) [2]string {
	t.Helper()
	ctx := context.Background()
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: validatingConfig}, v); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: mutatingConfig}, m); err != nil {
		t.Fatal(err)
	}
	return [2]string{v.ResourceVersion, m.ResourceVersion}
}
