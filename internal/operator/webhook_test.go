package operator_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/operator"
	"github.com/spectrocloud/nodewright/internal/testenv"
)

var env = testenv.New().WithWebhooks()

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }

// With --webhook-cert-mode=files the operator serves the certificate another tool wrote
// (cert-manager, here envtest, which also wrote its CA into the configurations), and
// reloads it from the folder.
func TestTheWebhooksServeACertificateFromFiles(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	opts := operator.Options{
		MetricsAddr: "0", ProbeAddr: "0", ShutdownTimeout: 5 * time.Second, CopyImage: "nodewright-copy:test",
		ProfileKeys: "nodewright-system/nodewright-profile-keys",
		Webhooks: operator.WebhookOptions{Enabled: true, Host: env.Webhooks.LocalServingHost, Port: env.Webhooks.LocalServingPort,
			CertMode: operator.CertModeFiles, CertDir: env.Webhooks.LocalServingCertDir},
	}
	mgr, err := operator.NewManager(ctx, env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the operator stopped with an error: %v", err)
		}
	})

	flip := &nwv1.BondModeFlipPlan{ObjectMeta: metav1.ObjectMeta{Name: "to-lacp"},
		Spec: nwv1.BondModeFlipPlanSpec{TargetMode: "802.3ad", NodeOrder: []string{"nowhere"}}}
	deadline := time.Now().Add(time.Minute)
	for {
		err := env.Client.Create(ctx, flip.DeepCopy())
		if err != nil && strings.Contains(err.Error(), `denied the request: spec.nodeOrder[0]: "nowhere" is not a Node of the cluster`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook did not answer through the API server: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestOptionsNameWhatIsWrong(t *testing.T) {
	cases := []struct {
		edit func(*operator.Options)
		want string
	}{
		{func(o *operator.Options) { o.Webhooks.CertMode = "vault" }, `--webhook-cert-mode "vault": want "self" or "files"`},
		{func(o *operator.Options) { o.Webhooks.Secret = "no-namespace" }, `--webhook-secret: "no-namespace": want namespace/name`},
		{func(o *operator.Options) { o.Webhooks.Port = 70000 }, "--webhook-port 70000: must be between 1 and 65535"},
		{func(o *operator.Options) { o.Webhooks.CertMode, o.Webhooks.CertDir = operator.CertModeFiles, "" }, "--webhook-cert-dir must not be empty"},
		{func(o *operator.Options) { o.ProfileKeys = "keys" }, `--profile-keys-configmap: "keys": want namespace/name`},
		{func(o *operator.Options) { o.Audit.Stdout = true }, "--audit-stdout needs --audit-dir"},
		{func(o *operator.Options) { o.Version = strings.Repeat("1", 65) }, "--operator-version is 65 bytes long; status.operatorVersion takes at most 64"},
	}
	for _, c := range cases {
		o := operator.Options{ProfileKeys: "nodewright-system/nodewright-profile-keys", Webhooks: operator.WebhookOptions{
			Enabled: true, Port: 9443, CertMode: operator.CertModeSelf, Secret: "nodewright-system/cert", Service: "nodewright-system/webhook"}}
		c.edit(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v; want it to say %q", err, c.want)
		}
	}
}
