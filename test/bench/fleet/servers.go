package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/spectrocloud/nodewright/test/bench/benchproc"
)

// procs are every process the benchmark started; killAll ends them on every way out.
type procs struct {
	mu   sync.Mutex
	list []*benchproc.Process
}

func (p *procs) add(x *benchproc.Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, x)
}

// killAll kills every process still running and waits for it (a stopped one too: SIGKILL
// ends a process stopped by SIGSTOP).
func (p *procs) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range p.list {
		if x.Cmd.ProcessState == nil {
			_ = x.Cmd.Process.Kill()
		}
		x.Stop()
	}
	p.list = nil
}

// pki is the CA of the hub's API server: its serving certificate for 127.0.0.1, the
// benchmark's client certificate (system:masters), which the hub uses too, and the
// service-account key.
type pki struct {
	caPEM                    []byte
	servingCert, servingKey  string
	clientCA, serviceAccount string
	adminCert, adminKey      []byte
	caCert                   *x509.Certificate
	caKey                    *ecdsa.PrivateKey
}

func newPKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench-fleet-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), caCert: caCert, caKey: caKey,
		servingCert: filepath.Join(dir, "serving.crt"), servingKey: filepath.Join(dir, "serving.key"),
		clientCA: filepath.Join(dir, "ca.crt"), serviceAccount: filepath.Join(dir, "sa.key")}
	if err := os.WriteFile(p.clientCA, p.caPEM, 0o600); err != nil {
		return nil, err
	}
	serving := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	certPEM, keyPEM, err := p.sign(serving)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCert, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKey, keyPEM, 0o600); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.serviceAccount, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}), 0o600); err != nil {
		return nil, err
	}
	client := func(serial int64, cn string, groups ...string) ([]byte, []byte, error) {
		return p.sign(&x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: groups},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	}
	if p.adminCert, p.adminKey, err = client(3, "bench-admin", "system:masters"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) sign(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// startEtcd runs etcd on free ports. --unsafe-no-fsync: the hub's thousands of summary
// writes at start-up would otherwise measure this machine's shared disk, not the hub.
func startEtcd(ps *procs, binary, dir string) (string, *benchproc.Process, error) {
	ports, err := benchproc.FreePorts(2)
	if err != nil {
		return "", nil, err
	}
	client, peer := ports[0], ports[1]
	url := "http://127.0.0.1:" + client
	p, err := benchproc.Start(exec.Command(binary, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://127.0.0.1:"+peer, "--initial-advertise-peer-urls", "http://127.0.0.1:"+peer,
		"--initial-cluster", "default=http://127.0.0.1:"+peer, "--unsafe-no-fsync", "--quota-backend-bytes", "8589934592",
		"--log-level", "warn"), filepath.Join(dir, "etcd.log"))
	if err != nil {
		return "", nil, err
	}
	ps.add(p)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url + "/health")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, p, nil
			}
		}
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("etcd did not become healthy within 1m (see %s)", filepath.Join(dir, "etcd.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// apiServer is one kube-apiserver on the shared etcd under its own prefix.
type apiServer struct {
	name  string
	proc  *benchproc.Process
	host  string
	admin *rest.Config
}

// startAPIServer starts a kube-apiserver and waits until it is ready.
func startAPIServer(ctx context.Context, ps *procs, binary, dir, name, etcd string, p *pki, extra ...string) (*apiServer, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	host := "https://127.0.0.1:" + port
	args := append([]string{"--etcd-servers", etcd, "--etcd-prefix", "/" + name,
		"--bind-address", "127.0.0.1", "--secure-port", port,
		"--tls-cert-file", p.servingCert, "--tls-private-key-file", p.servingKey, "--client-ca-file", p.clientCA,
		"--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.0.0.0/24",
		"--service-account-issuer", host + "/", "--service-account-key-file", p.serviceAccount,
		"--service-account-signing-key-file", p.serviceAccount, "--disable-admission-plugins", "ServiceAccount"}, extra...)
	proc, err := benchproc.Start(exec.Command(binary, args...), filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	ps.add(proc)
	s := &apiServer{name: name, proc: proc, host: host,
		admin: &rest.Config{Host: host, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAData: p.caPEM, CertData: p.adminCert, KeyData: p.adminKey}}}
	if err := s.waitReady(ctx, 3*time.Minute, filepath.Join(dir, name+".log")); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *apiServer) waitReady(ctx context.Context, patience time.Duration, log string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(s.admin)
	if err != nil {
		return err
	}
	rc := dc.RESTClient()
	deadline := time.Now().Add(patience)
	for {
		if s.proc.Cmd.ProcessState != nil {
			return fmt.Errorf("kube-apiserver %s exited (see %s)", s.name, log)
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := rc.Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("kube-apiserver %s was not ready within %s: %w (see %s)", s.name, patience, err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubeconfig reaches the API server with the given client certificate.
func (s *apiServer) kubeconfig(p *pki, cert, key []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["m"] = &clientcmdapi.Cluster{Server: s.host, CertificateAuthorityData: p.caPEM}
	cfg.AuthInfos["m"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["m"] = &clientcmdapi.Context{Cluster: "m", AuthInfo: "m"}
	cfg.CurrentContext = "m"
	return clientcmd.Write(*cfg)
}
