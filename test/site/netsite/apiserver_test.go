package netsite

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// TestTheAPIServerIsServedToTheNodesAlone: the forwarder listens on the host's address on the
// storage network, a local address of the machine that a packet from elsewhere could be
// routed to. A node's namespace gets through to the API server; a connection from any other
// address (here the host's own, in the root namespace) is closed unanswered.
func TestTheAPIServerIsServedToTheNodesAlone(t *testing.T) {
	n := New(t, nwv1.BondModeActiveBackup, "a")
	// The "API server": a TCP server that greets whoever reaches it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["site"] = &clientcmdapi.Cluster{Server: "https://" + ln.Addr().String()}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "site", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	from := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, from); err != nil {
		t.Fatal(err)
	}
	nodes, err := clientcmd.LoadFromFile(n.APIServer(t, from))
	if err != nil {
		t.Fatal(err)
	}
	forwarder := strings.TrimPrefix(nodes.Clusters["site"].Server, "https://")

	// From node a's namespace: through.
	out, err := n.Command("a", "bash", "-c", "exec 3<>/dev/tcp/"+strings.Replace(forwarder, ":", "/", 1)+" && head -n1 <&3").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("node a through the forwarder: %v, %q; want the API server's greeting", err, out)
	}
	// From the host: closed, without a word from the API server.
	c, err := net.DialTimeout("tcp", forwarder, 30*time.Second)
	if err != nil {
		t.Fatalf("dialling the forwarder from the host: %v", err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil || line != "" {
		t.Errorf("the host through the forwarder got %q (err %v); want the connection closed unanswered", line, err)
	}
}
