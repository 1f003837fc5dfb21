package chart_test

import (
	"crypto/x509"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	linstorURL = "https://linstor-controller.piraeus-datastore.svc:3371"
	gateName   = "nodewright-linstor-gate"
)

var withLINSTOR = []string{"--set", "linstor.url=" + linstorURL,
	"--set", "linstor.clientSecret.namespace=piraeus-datastore", "--set", "linstor.clientSecret.name=linstor-client-tls"}

func deployment(t *testing.T, objs []object, name string) appsv1.Deployment {
	t.Helper()
	o, ok := find(objs, "Deployment", name)
	if !ok {
		t.Fatalf("no Deployment %s", name)
	}
	var d appsv1.Deployment
	o.decode(t, &d)
	return d
}

func networkPolicy(t *testing.T, objs []object, name string) networkingv1.NetworkPolicy {
	t.Helper()
	o, ok := find(objs, "NetworkPolicy", name)
	if !ok {
		t.Fatalf("no NetworkPolicy %s", name)
	}
	var p networkingv1.NetworkPolicy
	o.decode(t, &p)
	return p
}

// TestLINSTORGate: with linstor.url the chart runs the LINSTOR gate, which alone holds
// LINSTOR's client Secret: its Deployment (one replica, the gate's own ServiceAccount, the
// URL and Secret as its flags, the operator's ServiceAccount as the one it serves), its
// Service, its certificate (valid for the Service, signed by the CA the operator is given);
// the operator gets the gate's URL, the CA and a projected token for the gate's audience, and
// no LINSTOR URL, no Secret of LINSTOR's. Without linstor.url there is no gate.
func TestLINSTORGate(t *testing.T) {
	root, _ := tools(t)
	chartYAML, err := os.ReadFile(filepath.Join(root, chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chartYAML, &chart); err != nil {
		t.Fatal(err)
	}

	t.Run("without linstor.url", func(t *testing.T) {
		t.Parallel()
		objs := render(t)
		for _, o := range objs {
			if strings.HasPrefix(o.Metadata.Name, gateName) {
				t.Errorf("%s rendered without linstor.url", o)
			}
		}
		c := operatorContainer(t, objs)
		for _, a := range c.Args {
			if strings.Contains(a, "linstor") {
				t.Errorf("the operator's argument %s without linstor.url", a)
			}
		}
	})

	t.Run("with linstor.url", func(t *testing.T) {
		t.Parallel()
		objs := render(t, withLINSTOR...)
		gate := deployment(t, objs, gateName)
		spec := gate.Spec.Template.Spec
		if gate.Spec.Replicas == nil || *gate.Spec.Replicas != 1 || gate.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("the gate runs %v replicas with strategy %s; want one, Recreate (it serialises deletions in memory)", gate.Spec.Replicas, gate.Spec.Strategy.Type)
		}
		if spec.ServiceAccountName != gateName {
			t.Errorf("the gate runs as ServiceAccount %q, want its own", spec.ServiceAccountName)
		}
		c := spec.Containers[0]
		if want := "ghcr.io/spectrocloud/nodewright-linstor-gate:v" + chart.AppVersion; c.Image != want {
			t.Errorf("the gate's image %q, want %q", c.Image, want)
		}
		for flag, want := range map[string]string{
			"--linstor-url": linstorURL, "--linstor-client-secret": "piraeus-datastore/linstor-client-tls",
			"--operator-serviceaccount": releaseNS + "/nodewright-operator", "--audience": gateName,
			"--register-nodes": "false", "--tls-cert-file": "/etc/nodewright/linstor-gate-tls/tls.crt",
		} {
			if got, _ := argValue(c, flag); got != want {
				t.Errorf("the gate's %s=%q, want %q", flag, got, want)
			}
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == gateName+"-tls" }) {
			t.Error("the gate does not mount its certificate's Secret")
		}

		op := deployment(t, objs, "nodewright-operator")
		oc := operatorContainer(t, objs)
		for flag, want := range map[string]string{
			"--linstor-gate-url":        "https://" + gateName + "." + releaseNS + ".svc:8443",
			"--linstor-gate-ca-file":    "/etc/nodewright/linstor-gate-ca/ca.crt",
			"--linstor-gate-token-file": "/var/run/secrets/nodewright/linstor-gate/token",
		} {
			if got, _ := argValue(oc, flag); got != want {
				t.Errorf("the operator's %s=%q, want %q", flag, got, want)
			}
		}
		for _, flag := range []string{"--linstor-url", "--linstor-client-secret"} {
			if _, ok := argValue(oc, flag); ok {
				t.Errorf("the operator is given %s: LINSTOR's URL and Secret are the gate's", flag)
			}
		}
		var projected, ca bool
		for _, v := range op.Spec.Template.Spec.Volumes {
			if v.Secret != nil && (v.Secret.SecretName == "linstor-client-tls" || v.Secret.SecretName == gateName+"-tls") {
				t.Errorf("the operator mounts Secret %s", v.Secret.SecretName)
			}
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if sa := src.ServiceAccountToken; sa != nil {
						projected = sa.Audience == gateName && sa.ExpirationSeconds != nil && *sa.ExpirationSeconds <= 3600
					}
				}
			}
			if v.ConfigMap != nil && v.ConfigMap.Name == gateName+"-ca" {
				ca = true
			}
		}
		if !projected || !ca {
			t.Errorf("the operator's volumes: a projected token for audience %s: %v; the gate's CA: %v", gateName, projected, ca)
		}

		// The Service reaches the gate's pods, and only them.
		o, ok := find(objs, "Service", gateName)
		if !ok {
			t.Fatal("no Service " + gateName)
		}
		var svc corev1.Service
		o.decode(t, &svc)
		for k, v := range svc.Spec.Selector {
			if gate.Spec.Template.Labels[k] != v {
				t.Errorf("the Service selects %s=%s, which the gate's pods do not carry", k, v)
			}
		}
		if svc.Spec.Selector["app.kubernetes.io/component"] != "linstor-gate" {
			t.Errorf("the Service selects %v", svc.Spec.Selector)
		}

		// The certificate: valid for the Service's name, signed by the CA the operator trusts.
		o, ok = find(objs, "Secret", gateName+"-tls")
		if !ok {
			t.Fatal("no Secret " + gateName + "-tls")
		}
		var secret corev1.Secret
		o.decode(t, &secret)
		o, ok = find(objs, "ConfigMap", gateName+"-ca")
		if !ok {
			t.Fatal("no ConfigMap " + gateName + "-ca")
		}
		var cm corev1.ConfigMap
		o.decode(t, &cm)
		if _, ok := cm.Data["tls.key"]; ok || strings.Contains(cm.Data["ca.crt"], "PRIVATE KEY") {
			t.Error("the operator's ConfigMap holds a key")
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
			t.Fatalf("the ConfigMap's ca.crt is no certificate: %q", cm.Data["ca.crt"])
		}
		block, _ := pem.Decode(secret.Data["tls.crt"])
		if block == nil {
			t.Fatal("the Secret's tls.crt is no PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: gateName + "." + releaseNS + ".svc"}); err != nil {
			t.Errorf("the gate's certificate does not verify for its Service with the operator's CA: %v", err)
		}
	})

	t.Run("digest", func(t *testing.T) {
		t.Parallel()
		digest := "sha256:" + strings.Repeat("3d", 32)
		gate := deployment(t, render(t, append(withLINSTOR, "--set", "linstor.gate.image.digest="+digest)...), gateName)
		if got := gate.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/spectrocloud/nodewright-linstor-gate@"+digest {
			t.Errorf("the gate's image %q with a digest", got)
		}
	})

	t.Run("refused values", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--set", "linstor.clientSecret.namespace=piraeus-datastore", "--set", "linstor.clientSecret.name=linstor-client-tls"}, "linstor.clientSecret: set linstor.url too"},
			{[]string{"--set", "linstor.url=http://linstor:3370", "--set", "linstor.clientSecret.namespace=p", "--set", "linstor.clientSecret.name=s"}, "a client certificate needs https"},
			{[]string{"--set", "linstor.url=" + linstorURL, "--set", "linstor.clientSecret.name=s"}, "give both namespace and name"},
			{[]string{"--set", "networkPolicy.egress.apiServerCIDRs[0]=10.0.0.1"}, "apiServerCIDRs"},
		} {
			_, stderr, err := helm(t, append([]string{"template", "nodewright", chartDir, "-n", releaseNS, "--kube-version", kubeVersion}, c.args...)...)
			if err == nil || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: %v %s; want a refusal saying %q", c.args, err, stderr, c.want)
			}
		}
	})
}

// port is a NetworkPolicy port's number, or its name.
func port(p networkingv1.NetworkPolicyPort) string {
	if p.Port == nil {
		return "any"
	}
	return p.Port.String() + "/" + string(*p.Protocol)
}

func ports(ps []networkingv1.NetworkPolicyPort) []string {
	var out []string
	for _, p := range ps {
		out = append(out, port(p))
	}
	slices.Sort(out)
	return out
}

// TestOperatorEgress: the operator's NetworkPolicy lets its pods reach the API server, the
// cluster's DNS, the LINSTOR gate (with linstor.url) and the audit receiver (with
// audit.ship.url), and nothing else; the gate's pods admit only the operator's on the gate's
// port, and the probes.
func TestOperatorEgress(t *testing.T) {
	gateSelector := map[string]string{"app.kubernetes.io/name": "nodewright", "app.kubernetes.io/instance": "nodewright", "app.kubernetes.io/component": "linstor-gate"}
	operatorSelector := map[string]string{"app.kubernetes.io/name": "nodewright", "app.kubernetes.io/instance": "nodewright", "app.kubernetes.io/component": "operator"}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		p := networkPolicy(t, render(t), "nodewright-operator")
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Fatalf("policy types %v: want Ingress and Egress", p.Spec.PolicyTypes)
		}
		if len(p.Spec.Egress) != 2 {
			t.Fatalf("%d egress rules, want 2 (the API server, DNS): %+v", len(p.Spec.Egress), p.Spec.Egress)
		}
		// helm template reads no EndpointSlice: any address on the API server's ports.
		api, dns := p.Spec.Egress[0], p.Spec.Egress[1]
		if got := ports(api.Ports); !slices.Equal(got, []string{"443/TCP", "6443/TCP"}) || len(api.To) != 0 {
			t.Errorf("the API server's rule: ports %v, to %+v", got, api.To)
		}
		if got := ports(dns.Ports); !slices.Equal(got, []string{"53/TCP", "53/UDP"}) || len(dns.To) != 1 ||
			dns.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
			t.Errorf("the DNS rule: ports %v, to %+v", got, dns.To)
		}
	})

	t.Run("all-on", func(t *testing.T) {
		t.Parallel()
		objs := render(t, "-f", allOn)
		p := networkPolicy(t, objs, "nodewright-operator")
		if len(p.Spec.Egress) != 4 {
			t.Fatalf("%d egress rules, want 4 (the API server, DNS, the gate, the audit receiver): %+v", len(p.Spec.Egress), p.Spec.Egress)
		}
		api, dns, gate, receiver := p.Spec.Egress[0], p.Spec.Egress[1], p.Spec.Egress[2], p.Spec.Egress[3]
		var cidrs []string
		for _, to := range api.To {
			cidrs = append(cidrs, to.IPBlock.CIDR)
		}
		if got := ports(api.Ports); !slices.Equal(got, []string{"6443/TCP"}) || !slices.Equal(cidrs, []string{"10.0.0.10/32", "10.0.0.11/32"}) {
			t.Errorf("the API server's rule: ports %v, to %v", got, cidrs)
		}
		if dns.To[0].PodSelector.MatchLabels["k8s-app"] != "coredns" {
			t.Errorf("the DNS rule goes to %+v, not the values'", dns.To)
		}
		if got := ports(gate.Ports); !slices.Equal(got, []string{"8443/TCP"}) || len(gate.To) != 1 || gate.To[0].NamespaceSelector != nil ||
			!maps.Equal(gate.To[0].PodSelector.MatchLabels, gateSelector) {
			t.Errorf("the gate's rule: ports %v, to %+v", got, gate.To)
		}
		// all-on ships to https://audit.example.com/v1/records: port 443, to the values' peer.
		if got := ports(receiver.Ports); !slices.Equal(got, []string{"443/TCP"}) || len(receiver.To) != 1 || receiver.To[0].IPBlock.CIDR != "192.0.2.10/32" {
			t.Errorf("the audit receiver's rule: ports %v, to %+v", got, receiver.To)
		}

		// The gate admits the operator's pods on its port, and anyone on the probes' only.
		gp := networkPolicy(t, objs, gateName)
		if !maps.Equal(gp.Spec.PodSelector.MatchLabels, gateSelector) || len(gp.Spec.Ingress) != 2 {
			t.Fatalf("the gate's policy: %+v", gp.Spec)
		}
		https, probes := gp.Spec.Ingress[0], gp.Spec.Ingress[1]
		if len(https.From) != 1 || !maps.Equal(https.From[0].PodSelector.MatchLabels, operatorSelector) || https.Ports[0].Port.String() != "https" {
			t.Errorf("the gate's port admits %+v", https)
		}
		if len(probes.Ports) != 1 || *probes.Ports[0].Port != intstr.FromString("probes") {
			t.Errorf("the gate's other rule: %+v", probes)
		}
		// The ports named exist on the gate's container.
		c := deployment(t, objs, gateName).Spec.Template.Spec.Containers[0]
		for _, name := range []string{"https", "probes"} {
			if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name }) {
				t.Errorf("the gate's container has no port %s", name)
			}
		}
	})
}
