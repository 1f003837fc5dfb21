package testenv

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/spectrocloud/nodewright/internal/kubelite"
)

// LiteConfig is the kubelite Config (the node agent's client) of cfg: its server, TLS and
// credentials.
func LiteConfig(t testing.TB, cfg *rest.Config) *kubelite.Config {
	t.Helper()
	read := func(data []byte, file string) []byte {
		if len(data) > 0 || file == "" {
			return data
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tc := cfg.TLSClientConfig
	return &kubelite.Config{Host: cfg.Host, CAData: read(tc.CAData, tc.CAFile), Insecure: tc.Insecure, ServerName: tc.ServerName,
		CertData: read(tc.CertData, tc.CertFile), KeyData: read(tc.KeyData, tc.KeyFile),
		Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile, UserAgent: "testenv"}
}

// LiteClient is a kubelite client (the node agent's) with the identity of cfg.
func LiteClient(t testing.TB, cfg *rest.Config) *kubelite.Client {
	t.Helper()
	c, err := kubelite.New(LiteConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// LiteClient is a kubelite client (the node agent's) of a cluster administrator.
func (e *Env) LiteClient(t testing.TB) *kubelite.Client {
	t.Helper()
	return LiteClient(t, e.Config)
}
