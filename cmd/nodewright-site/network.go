package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/linstor"
	"github.com/spectrocloud/nodewright/test/site/linstorsim"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// The storage network of the local site (docs/local-site.md, "The storage network"): the
// played network of test/site/netsite, its switch, the played DRBD of every node, and
// LINSTOR's stand-in (test/site/linstorsim) placing the volumes, as one process, until SIGTERM.
// What it made is written into --dir for hack/demo.sh; a fault is asked for through the
// control socket there (the fault command).

// Storage layouts the network starts with.
const (
	// storageReplicated places every volume on every node: a three-node cluster, MultiNode.
	storageReplicated = "replicated"
	// storageSingleNode places every volume on the first node alone: a single-node cluster
	// whose peers joined, SingleNode, for a ReplicationUpgrade.
	storageSingleNode = "single-node"
)

// Files the network writes into its folder.
const (
	readyFile        = "ready"
	controlSocket    = "control.sock"
	nodesKubeconfig  = "nodes.kubeconfig"
	linstorDir       = "linstor"
	gateTLSDir       = "gate-tls"
	namespaceFile    = "netns"
	storagePool      = "lvm-thin"
	storageGroup     = "vm-disks"
	secondResource   = "demo-data"
	volumeSizeKiB    = 256 << 10
	resourcesEvery   = 100 * time.Millisecond
	persistentVolume = time.Second
)

// bondModes are Linux's bonding modes, as the API's BondMode enumerates them.
var bondModes = []nwv1.BondMode{nwv1.BondModeBalanceRR, nwv1.BondModeActiveBackup, nwv1.BondModeBalanceXOR,
	nwv1.BondModeBroadcast, nwv1.BondMode8023AD, nwv1.BondModeBalanceTLB, nwv1.BondModeBalanceALB}

type networkSettings struct {
	kubeconfig, dir, nodes, mode, alsoCarry, storage, driver string
	syncTime                                                 time.Duration
}

func runNetwork(ctx context.Context, args []string, stderr io.Writer) error {
	var s networkSettings
	fs := flag.NewFlagSet("nodewright-site network", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required): the nodes reach its API server through the network")
	fs.StringVar(&s.dir, "dir", "", "folder of the nodes' played bonds, DRBD and root files, and of what the network writes for the site (required)")
	fs.StringVar(&s.nodes, "nodes", "edge-1,edge-2,edge-3", "the nodes, comma-separated")
	fs.StringVar(&s.mode, "mode", string(nwv1.BondModeActiveBackup), "every node's bond mode at the start, the one every switch port carries")
	fs.StringVar(&s.alsoCarry, "also-carry", "", "other bond modes every switch port carries, comma-separated (the profile's allowedBondModes)")
	fs.StringVar(&s.storage, "storage", storageReplicated, "where the volumes are: replicated (every node) or single-node (the first node alone)")
	fs.StringVar(&s.driver, "driver", "linstor.csi.linbit.com", "CSI driver whose PersistentVolumes LINSTOR's stand-in holds as resources")
	fs.DurationVar(&s.syncTime, "sync-time", 20*time.Second, "how long a new replica's initial synchronisation takes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.kubeconfig == "" || s.dir == "" {
		return errors.New("--kubeconfig and --dir are required")
	}
	nodes := strings.Split(s.nodes, ",")
	if len(nodes) == 0 || slices.Contains(nodes, "") {
		return fmt.Errorf("--nodes %q: name each node", s.nodes)
	}
	if s.storage != storageReplicated && s.storage != storageSingleNode {
		return fmt.Errorf("--storage %q: must be %s or %s", s.storage, storageReplicated, storageSingleNode)
	}
	mode := nwv1.BondMode(s.mode)
	if !slices.Contains(bondModes, mode) {
		return fmt.Errorf("--mode %q: not a bond mode (%v)", s.mode, bondModes)
	}
	carried := []nwv1.BondMode{mode}
	if s.alsoCarry != "" {
		for _, m := range strings.Split(s.alsoCarry, ",") {
			if !slices.Contains(bondModes, nwv1.BondMode(m)) {
				return fmt.Errorf("--also-carry %q: %q is not a bond mode (%v)", s.alsoCarry, m, bondModes)
			}
			carried = append(carried, nwv1.BondMode(m))
		}
	}
	if s.syncTime <= 0 {
		return fmt.Errorf("--sync-time %s: must be positive", s.syncTime)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(s.dir, readyFile))

	n, err := netsite.Start(s.dir, mode, nodes...)
	if n != nil {
		defer n.Close()
	}
	if err != nil {
		return err
	}
	if err := n.PlayDRBD(); err != nil {
		return err
	}
	for _, name := range nodes {
		n.Expect(name, carried...)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { n.Run(ctx) })
	if err := n.ServeAPI(s.kubeconfig, filepath.Join(s.dir, nodesKubeconfig)); err != nil {
		return fmt.Errorf("serving the API server to the nodes: %w", err)
	}
	for _, name := range nodes {
		node := n.Node(name)
		for _, d := range []string{"etc/systemd/network", "oem"} {
			if err := os.MkdirAll(filepath.Join(node.Root, d), 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(s.dir, name, namespaceFile), []byte(node.Namespace+"\n"), 0o644); err != nil {
			return err
		}
	}

	sim, err := linstorsim.New(linstorsim.Options{TLS: true, SyncTime: s.syncTime})
	if err != nil {
		return err
	}
	defer sim.Close()
	if err := seedLINSTOR(sim, n, nodes); err != nil {
		return err
	}
	if err := writeLINSTOR(filepath.Join(s.dir, linstorDir), sim); err != nil {
		return err
	}
	if err := writeServingCert(filepath.Join(s.dir, gateTLSDir), "127.0.0.1"); err != nil {
		return err
	}
	placeOn := nodes
	if s.storage == storageSingleNode {
		placeOn = nodes[:1]
	}
	if err := addVolume(sim, secondResource, placeOn); err != nil {
		return err
	}
	wg.Go(func() {
		sim.FollowResources(ctx, resourcesEvery, func(def string, diskful, diskless []string) error {
			return n.PlaceDRBDDiskless(def, diskful, diskless)
		})
	})
	wg.Go(func() { followVolumes(ctx, kube, sim, s.driver, placeOn, stderr) })
	wg.Go(func() { reportViolations(ctx, sim, stderr) })

	ln, err := net.Listen("unix", filepath.Join(s.dir, controlSocket))
	if err != nil {
		return err
	}
	wg.Go(func() { <-ctx.Done(); _ = ln.Close() })
	wg.Go(func() { serveControl(ln, n) })

	if err := os.WriteFile(filepath.Join(s.dir, readyFile), []byte("ready\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "the storage network runs: nodes %s, bonds %s, volumes %s, LINSTOR at %s\n", s.nodes, mode, s.storage, sim.URL)
	<-ctx.Done()
	_ = os.Remove(filepath.Join(s.dir, readyFile))
	return nil
}

// seedLINSTOR registers every node's satellite at its storage address with a pool, as Piraeus
// does, and the resource group the volumes belong to.
func seedLINSTOR(sim *linstorsim.Server, n *netsite.Network, nodes []string) error {
	for _, name := range nodes {
		if err := sim.AddNode(linstorsim.Node{Name: name, Address: n.Node(name).Address}); err != nil {
			return err
		}
		if err := sim.AddStoragePool(linstorsim.Pool{Node: name, Name: storagePool, TotalKiB: 100 << 20, FreeKiB: 100 << 20}); err != nil {
			return err
		}
	}
	sim.SetControllerProp(linstor.PropBalanceResourcesEnabled, "true")
	return sim.AddResourceGroup(linstorsim.Group{Name: storageGroup, PlaceCount: 1, StoragePool: storagePool})
}

// addVolume adds a resource definition with a replica on each of nodes.
func addVolume(sim *linstorsim.Server, name string, nodes []string) error {
	if err := sim.AddResourceDefinition(linstorsim.Definition{Name: name, Group: storageGroup, SizesKiB: []int64{volumeSizeKiB}}); err != nil {
		return err
	}
	for _, node := range nodes {
		if err := sim.AddResource(linstorsim.Resource{Definition: name, Node: node, Pool: storagePool}); err != nil {
			return err
		}
	}
	return nil
}

// followVolumes plays LINSTOR's CSI driver: every PersistentVolume of driver gets a resource
// definition named after its volume handle, with a replica on each of nodes. A deleted volume
// keeps its resource (the site's CSI driver deletes the file; LINSTOR's resource stays, which is
// harmless here).
func followVolumes(ctx context.Context, kube kubernetes.Interface, sim *linstorsim.Server, driver string, nodes []string, stderr io.Writer) {
	held := map[string]bool{}
	for {
		pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, pv := range pvs.Items {
				handle := volumeHandle(&pv, driver)
				if handle == "" || held[handle] {
					continue
				}
				if err := addVolume(sim, handle, nodes); err != nil {
					fmt.Fprintf(stderr, "LINSTOR's stand-in: volume %s: %v\n", handle, err)
				}
				held[handle] = true
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(persistentVolume):
		}
	}
}

func volumeHandle(pv *corev1.PersistentVolume, driver string) string {
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driver {
		return ""
	}
	return pv.Spec.CSI.VolumeHandle
}

// reportViolations logs any request of the operator's that broke LINSTOR's API document.
func reportViolations(ctx context.Context, sim *linstorsim.Server, stderr io.Writer) {
	for {
		for _, v := range sim.TakeViolations() {
			fmt.Fprintf(stderr, "LINSTOR's stand-in: a request broke LINSTOR's API: %s\n", v)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// writeLINSTOR writes the stand-in's URL and its client certificate (tls.crt, tls.key,
// ca.crt), as Piraeus' client Secret holds it.
func writeLINSTOR(dir string, sim *linstorsim.Server) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, data := range sim.ClientSecret() {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "url"), []byte(sim.URL+"\n"), 0o644)
}

// writeServingCert writes a CA (ca.crt) and a serving certificate for host signed by it
// (tls.crt, tls.key): the LINSTOR gate's on this machine, where the operator reaches it.
func writeServingCert(dir, host string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodewright-demo-gate-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP(host)}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		"ca.crt":  {Type: "CERTIFICATE", Bytes: caDER},
		"tls.crt": {Type: "CERTIFICATE", Bytes: leafDER},
		"tls.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// serveControl answers the fault command: one line in, one line out.
func serveControl(ln net.Listener, n *netsite.Network) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			_, _ = fmt.Fprintln(c, control(n, strings.Fields(line)))
		}()
	}
}

// control carries out one fault command and says what it did, or "error: " and why.
func control(n *netsite.Network, words []string) string {
	if len(words) == 0 {
		return "error: say what"
	}
	node := ""
	if len(words) > 1 {
		node = words[1]
	}
	if node == "" || n.Node(node) == nil {
		return fmt.Sprintf("error: %q is not a node of the storage network", node)
	}
	switch {
	case words[0] == "never-carry" && len(words) == 3:
		mode := nwv1.BondMode(words[2])
		if !slices.Contains(bondModes, mode) {
			return fmt.Sprintf("error: %q is not a bond mode (%v)", words[2], bondModes)
		}
		n.NeverCarry(node, mode)
		return fmt.Sprintf("the switch port of %s no longer carries %s", node, mode)
	case words[0] == "carry" && len(words) == 2:
		n.NeverCarry(node, "")
		return fmt.Sprintf("the switch port of %s carries every mode it expects again", node)
	}
	return fmt.Sprintf("error: unknown command %q", strings.Join(words, " "))
}

// runFault sends a fault command to the running network of --dir.
func runFault(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-site fault", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder of the running storage network (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	words := fs.Args()
	switch {
	case len(words) == 3 && words[0] == "never-carry":
	case len(words) == 2 && words[0] == "carry":
	default:
		return fmt.Errorf("fault %q: say never-carry NODE MODE or carry NODE", strings.Join(words, " "))
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(*dir, controlSocket))
	if err != nil {
		return fmt.Errorf("the storage network of %s is not running: %w", *dir, err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, strings.Join(words, " ")); err != nil {
		return err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	answer = strings.TrimSpace(answer)
	if msg, failed := strings.CutPrefix(answer, "error: "); failed {
		return errors.New(msg)
	}
	_, err = fmt.Fprintln(stdout, answer)
	return err
}
