package certs

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	subject = Subject{DNSNames: []string{"nodewright-webhook.nodewright-system.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	life    = Lifetimes{CA: 300 * 24 * time.Hour, Serving: 30 * 24 * time.Hour, RenewBefore: 1.0 / 3}
)

func fresh(t *testing.T) Bundle {
	t.Helper()
	b, err := Bundle{}.Renew(t0, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func certsIn(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}

func TestANewBundleServesItsSubjectAndIsDueAtTwoThirdsOfItsLife(t *testing.T) {
	b := fresh(t)
	due, why, next := b.Due(t0, subject, life)
	if due {
		t.Fatalf("a fresh bundle is due: %s", why)
	}
	// Valid from five minutes back (a lagging clock) to 30 days on; renewed with a third left.
	if want := t0.Add(30*24*time.Hour - (30*24*time.Hour+backdate)/3); !next.Equal(want) {
		t.Fatalf("next renewal %s, want %s (two thirds of the serving certificate's life)", next, want)
	}
	if due, _, _ := b.Due(next, subject, life); !due {
		t.Fatal("not due at its renewal time")
	}
	leaf := certsIn(t, b.Cert)[0]
	if err := leaf.VerifyHostname("nodewright-webhook.nodewright-system.svc"); err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b.CABundle)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the serving certificate does not verify against the bundle: %v", err)
	}
	if _, err := b.Certificate(); err != nil {
		t.Fatal(err)
	}
}

func TestRenewingTheServingCertificateKeepsTheCA(t *testing.T) {
	b := fresh(t)
	at := t0.Add(21 * 24 * time.Hour)
	r, err := b.Renew(at, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.CACert) != string(b.CACert) || string(r.CABundle) != string(b.CABundle) {
		t.Fatal("the CA changed although only the serving certificate was due")
	}
	if string(r.Cert) == string(b.Cert) {
		t.Fatal("the serving certificate was not renewed")
	}
	if due, why, _ := r.Due(at, subject, life); due {
		t.Fatalf("due right after renewal: %s", why)
	}
}

func TestRenewingTheCAKeepsTheOldOneTrustedUntilItExpires(t *testing.T) {
	b := fresh(t)
	at := t0.Add(201 * 24 * time.Hour) // past two thirds of the CA's 300 days
	due, why, _ := b.Due(at, subject, life)
	if !due || !strings.Contains(why, "the CA expires") {
		t.Fatalf("due=%v (%s); want the CA due", due, why)
	}
	r, err := b.Renew(at, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.CACert) == string(b.CACert) {
		t.Fatal("the CA was not renewed")
	}
	bundle := certsIn(t, r.CABundle)
	if len(bundle) != 2 || !bundle[1].Equal(certsIn(t, b.CACert)[0]) {
		t.Fatalf("the bundle holds %d certificates; want the new CA and the old one", len(bundle))
	}
	// Once the old CA has expired, the next CA renewal drops it.
	later := at.Add(201 * 24 * time.Hour)
	r2, err := r.Renew(later, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(certsIn(t, r2.CABundle)); n != 2 {
		t.Fatalf("bundle after the second CA renewal holds %d certificates, want 2 (the new CA and the previous, still valid)", n)
	}
	for _, c := range certsIn(t, r2.CABundle) {
		if c.Equal(certsIn(t, b.CACert)[0]) {
			t.Fatal("the expired first CA is still trusted")
		}
	}
}

func TestABundleForAnotherSubjectOrDamagedIsDue(t *testing.T) {
	b := fresh(t)
	other := Subject{DNSNames: []string{"webhook.elsewhere.svc"}}
	if due, why, _ := b.Due(t0, other, life); !due || !strings.Contains(why, "not [webhook.elsewhere.svc]") {
		t.Fatalf("due=%v (%s); want due for another subject", due, why)
	}
	damaged := b
	damaged.Key = b.CAKey // a key that does not belong to the certificate
	if due, why, _ := damaged.Due(t0, subject, life); !due || !strings.Contains(why, "tls.crt and tls.key") {
		t.Fatalf("due=%v (%s); want a mismatched key found", due, why)
	}
	if due, why, _ := (Bundle{}).Due(t0, subject, life); !due || !strings.Contains(why, "ca.crt: no PEM certificate") {
		t.Fatalf("due=%v (%s); want an empty bundle due", due, why)
	}
	r, err := damaged.Renew(t0, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if due, why, _ := r.Due(t0, subject, life); due {
		t.Fatalf("still due after renewing a damaged bundle: %s", why)
	}
	if _, err := (Bundle{}).Renew(t0, Subject{}, life); err == nil {
		t.Fatal("a certificate for no name was issued")
	}
}

func TestADamagedServingKeyKeepsTheCA(t *testing.T) {
	b := fresh(t)
	damaged := b
	damaged.Key = []byte("not a key")
	r, err := damaged.Renew(t0, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.CACert) != string(b.CACert) || string(r.CABundle) != string(b.CABundle) {
		t.Fatal("a damaged serving key cost the CA")
	}
	damaged = b
	damaged.CABundle = []byte("edited")
	r, err = damaged.Renew(t0, subject, life)
	if err != nil {
		t.Fatal(err)
	}
	if string(r.CACert) != string(b.CACert) || string(r.CABundle) != string(b.CACert) {
		t.Fatal("a damaged bundle was not rebuilt from the CA it should hold")
	}
}
