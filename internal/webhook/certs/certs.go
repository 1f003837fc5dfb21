// Package certs gives the operator's admission webhooks a serving certificate without
// cert-manager: a private CA and a serving certificate kept in one Secret that every replica
// shares, renewed before they expire, and the CA bundle written into the webhook
// configurations so that the API server trusts the replicas.
//
// The Secret is the single source of truth. Every replica reads it, creates it when it is
// missing and renews it when it is due; writes carry the Secret's resourceVersion, so two
// replicas renewing at once agree on one result. A replica serves from memory what it last
// read, and reads again when the certificate it holds is due.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// The Secret's keys.
const (
	// KeyCACert is the CA certificate that signs the serving certificate (PEM).
	KeyCACert = "ca.crt"
	// KeyCAKey is the CA's private key (PKCS #8 PEM).
	KeyCAKey = "ca.key"
	// KeyCABundle is what the API server trusts: the CA and, while a renewed CA takes over,
	// the one before it (PEM).
	KeyCABundle = "ca-bundle.crt"
	// KeyCert is the serving certificate (PEM).
	KeyCert = "tls.crt"
	// KeyKey is the serving certificate's private key (PKCS #8 PEM).
	KeyKey = "tls.key"
)

// Lifetimes say how long certificates live and when they are renewed.
type Lifetimes struct {
	// CA is how long a CA certificate is valid.
	CA time.Duration
	// Serving is how long a serving certificate is valid.
	Serving time.Duration
	// RenewBefore is the share of a certificate's life left (0 to 1) at which it is renewed.
	RenewBefore float64
}

// DefaultLifetimes are a CA for ten years and a serving certificate for one, each renewed with a
// third of its life left.
var DefaultLifetimes = Lifetimes{CA: 10 * 365 * 24 * time.Hour, Serving: 365 * 24 * time.Hour, RenewBefore: 1.0 / 3}

// Subject names the service the webhooks are reached at.
type Subject struct {
	// DNSNames are the names the serving certificate is valid for.
	DNSNames []string
	// IPs are the addresses it is valid for (a local test server's, say).
	IPs []net.IP
}

// Bundle is the CA and serving certificate as stored in the Secret.
type Bundle struct {
	CACert, CAKey, CABundle, Cert, Key []byte
}

// FromData reads a bundle from a Secret's data.
func FromData(data map[string][]byte) Bundle {
	return Bundle{CACert: data[KeyCACert], CAKey: data[KeyCAKey], CABundle: data[KeyCABundle], Cert: data[KeyCert], Key: data[KeyKey]}
}

// Data is the bundle as a Secret's data.
func (b Bundle) Data() map[string][]byte {
	return map[string][]byte{KeyCACert: b.CACert, KeyCAKey: b.CAKey, KeyCABundle: b.CABundle, KeyCert: b.Cert, KeyKey: b.Key}
}

// parsed is a bundle whose parts parsed.
type parsed struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	leaf   *x509.Certificate
	tlsKey tls.Certificate
}

// parseCA reads the CA and its key, which must match.
func (b Bundle) parseCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	ca, err := parseCert(b.CACert, KeyCACert)
	if err != nil {
		return nil, nil, err
	}
	caKey, err := parseKey(b.CAKey, KeyCAKey)
	if err != nil {
		return nil, nil, err
	}
	if !caKey.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not belong to %s", KeyCAKey, KeyCACert)
	}
	return ca, caKey, nil
}

// parse checks that the bundle is complete and consistent: the CA and its key match, the
// serving certificate was signed by the CA and matches its key, and the bundle holds the CA.
func (b Bundle) parse() (*parsed, error) {
	ca, caKey, err := b.parseCA()
	if err != nil {
		return nil, err
	}
	leaf, err := parseCert(b.Cert, KeyCert)
	if err != nil {
		return nil, err
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("%s was not signed by %s: %w", KeyCert, KeyCACert, err)
	}
	pair, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", KeyCert, KeyKey, err)
	}
	if !bytes.Contains(b.CABundle, b.CACert) {
		return nil, fmt.Errorf("%s does not hold %s", KeyCABundle, KeyCACert)
	}
	return &parsed{ca: ca, caKey: caKey, leaf: leaf, tlsKey: pair}, nil
}

// Due says whether the bundle must be renewed now, and why; when not, next is when it will
// be. A bundle that does not parse, or whose certificate does not cover subject, is due.
func (b Bundle) Due(now time.Time, subject Subject, life Lifetimes) (due bool, why string, next time.Time) {
	p, err := b.parse()
	if err != nil {
		return true, err.Error(), time.Time{}
	}
	caRenew := renewAt(p.ca, life.RenewBefore)
	leafRenew := renewAt(p.leaf, life.RenewBefore)
	switch {
	case !now.Before(caRenew):
		return true, fmt.Sprintf("the CA expires at %s", p.ca.NotAfter.Format(time.RFC3339)), time.Time{}
	case !now.Before(leafRenew):
		return true, fmt.Sprintf("the serving certificate expires at %s", p.leaf.NotAfter.Format(time.RFC3339)), time.Time{}
	case !covers(p.leaf, subject):
		return true, fmt.Sprintf("the serving certificate is for %v %v, not %v %v", p.leaf.DNSNames, p.leaf.IPAddresses, subject.DNSNames, subject.IPs), time.Time{}
	}
	return false, "", minTime(caRenew, leafRenew)
}

// Renew returns the bundle with what is due replaced: a new CA only when the CA is due or
// unusable (the old CA stays in the bundle while it is valid, so replicas still serving a
// certificate it signed stay trusted), and always a new serving certificate. A damaged
// serving certificate or key, or a damaged bundle, never costs a CA that is still good.
func (b Bundle) Renew(now time.Time, subject Subject, life Lifetimes) (Bundle, error) {
	oldCA, oldKey, caErr := b.parseCA()
	var ca *x509.Certificate
	var caKey *ecdsa.PrivateKey
	out := Bundle{}
	if caErr == nil && now.Before(renewAt(oldCA, life.RenewBefore)) {
		ca, caKey = oldCA, oldKey
		out.CACert, out.CAKey, out.CABundle = b.CACert, b.CAKey, b.CABundle
		if !bytes.Contains(out.CABundle, out.CACert) {
			out.CABundle = out.CACert
		}
	} else {
		var err error
		ca, caKey, out.CACert, out.CAKey, err = newCA(now, life.CA)
		if err != nil {
			return Bundle{}, err
		}
		out.CABundle = out.CACert
		// The CA being replaced stays trusted until it expires.
		if caErr == nil && now.Before(oldCA.NotAfter) {
			out.CABundle = append(slices.Clone(out.CACert), b.CACert...)
		}
	}
	var err error
	out.Cert, out.Key, err = newServing(now, life.Serving, subject, ca, caKey)
	if err != nil {
		return Bundle{}, err
	}
	return out, nil
}

// Certificate is the serving certificate for a TLS server.
func (b Bundle) Certificate() (*tls.Certificate, error) {
	p, err := b.parse()
	if err != nil {
		return nil, err
	}
	return &p.tlsKey, nil
}

func renewAt(c *x509.Certificate, before float64) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Add(-time.Duration(float64(life) * before))
}

func covers(c *x509.Certificate, s Subject) bool {
	for _, name := range s.DNSNames {
		if !slices.Contains(c.DNSNames, name) {
			return false
		}
	}
	for _, ip := range s.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// backdate lets a certificate be used by an API server whose clock is a little behind.
const backdate = 5 * time.Minute

func newCA(now time.Time, life time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("nodewright-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(life),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("creating the webhook CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func newServing(now time.Time, life time.Duration, s Subject, ca *x509.Certificate, caKey *ecdsa.PrivateKey) ([]byte, []byte, error) {
	if len(s.DNSNames) == 0 && len(s.IPs) == 0 {
		return nil, nil, errors.New("the serving certificate needs at least one DNS name or IP address")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(life)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := "nodewright-webhook"
	if len(s.DNSNames) > 0 {
		cn = s.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     slices.Clone(s.DNSNames),
		IPAddresses:  slices.Clone(s.IPs),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the webhook serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCert(data []byte, key string) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM certificate", key)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return c, nil
}

func parseKey(data []byte, key string) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: no PKCS #8 PEM private key", key)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", key)
	}
	return ec, nil
}
