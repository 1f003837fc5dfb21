package operator_test

import (
	"strings"
	"testing"

	"github.com/spectrocloud/nodewright/internal/operator"
)

// TestLINSTORFlags: the operator takes the LINSTOR gate's URL, CA file and token file, and
// refuses LINSTOR's own URL and client Secret, which are the gate's alone.
func TestLINSTORFlags(t *testing.T) {
	base := func() operator.Options {
		return operator.Options{ProfileKeys: "nodewright-system/nodewright-profile-keys", Webhooks: operator.WebhookOptions{
			Enabled: true, Port: 9443, CertMode: operator.CertModeSelf, Secret: "nodewright-system/cert", Service: "nodewright-system/webhook"}}
	}
	gate := func(o *operator.Options) {
		o.LINSTORGateURL = "https://nodewright-linstor-gate.nodewright-system.svc:8443"
		o.LINSTORGateCAFile, o.LINSTORGateTokenFile = "/etc/nodewright/linstor-gate-ca/ca.crt", "/var/run/secrets/nodewright/linstor-gate/token"
	}
	cases := []struct {
		edit func(*operator.Options)
		want string
	}{
		{func(o *operator.Options) { o.LINSTORURL = "https://linstor-controller.piraeus-datastore.svc:3371" }, "the operator holds no LINSTOR credential"},
		{func(o *operator.Options) { o.LINSTORClientSecret = "piraeus-datastore/linstor-client-tls" }, "the operator holds no LINSTOR credential"},
		{func(o *operator.Options) { gate(o); o.LINSTORGateCAFile = "" }, "--linstor-gate-url needs --linstor-gate-ca-file"},
		{func(o *operator.Options) { gate(o); o.LINSTORGateTokenFile = "" }, "--linstor-gate-url needs --linstor-gate-token-file"},
		{func(o *operator.Options) { gate(o); o.LINSTORGateURL = "http://nodewright-linstor-gate:8443" }, "caFile"},
		{func(o *operator.Options) { o.LINSTORGateTokenFile = "/token" }, "need --linstor-gate-url"},
	}
	for _, c := range cases {
		o := base()
		c.edit(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v; want it to say %q", err, c.want)
		}
	}
	o := base()
	gate(&o)
	if err := o.Validate(); err != nil {
		t.Errorf("the chart's flags: %v", err)
	}
}
