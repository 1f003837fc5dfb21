// Command nodewright-site runs the local site's stand-ins for the parts of an edge cluster
// that do not exist here: the kubelet of one node, KubeVirt, a CSI driver with snapshots and
// clones, and the Job controller, all on real files (see test/site). make demo runs it beside
// the simulated cluster so that a VM's volume can really be migrated there.
//
//	nodewright-site run  --kubeconfig FILE --dir DIR --copy-binary FILE [--drivers D,...] [--node-name N] [--nodes N,...] [--namespaces NS,...]
//	nodewright-site fill --kubeconfig FILE --dir DIR [--drivers D,...] --mib N [--seed S] NAMESPACE PVC
//	nodewright-site network --kubeconfig FILE --dir DIR [--nodes N,...] [--mode MODE] [--storage replicated|single-node]
//	nodewright-site fault --dir DIR never-carry NODE MODE | carry NODE
//	nodewright-site kairos-image --registry DIR VERSION...
//	nodewright-site kairos-node --host-root DIR --dir DIR --registry DIR --image REF [--drbd-dir DIR] -- AGENT [ARGS...]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/spectrocloud/nodewright/test/site"
)

const usage = `usage:
  nodewright-site run  --kubeconfig FILE --dir DIR --copy-binary FILE [--drivers D,...] [--node-name N] [--nodes N,...] [--namespaces NS,...]
      play the kubelet of one node, KubeVirt, the CSI drivers and the Job controller until SIGTERM
  nodewright-site fill --kubeconfig FILE --dir DIR [--drivers D,...] --mib N [--seed S] NAMESPACE PVC
      write N MiB of pseudo-random data at the start of a claim's volume (its backing file
      DIR/volumes/<the PV's spec.csi.volumeHandle>.img), once it is bound; the rest of the
      volume is left as it was. The data is ChaCha8 from a key made of the namespace and the
      claim's name, so two claims get different bytes and the same claim the same bytes at
      every fill; --seed S uses the key of S instead, the same for any claim it is given.
  nodewright-site network --kubeconfig FILE --dir DIR [--nodes N,...] [--mode MODE] [--storage replicated|single-node] [--sync-time D]
      play the nodes' storage network (network namespaces, a switch, bonds, DRBD) and LINSTOR until SIGTERM; needs root
  nodewright-site fault --dir DIR never-carry NODE MODE | carry NODE
      make the switch port of NODE refuse MODE (a port not set up for it), or carry it again
  nodewright-site kairos-image --registry DIR VERSION...
      add played Kairos images (vX.Y.Z) to the played registry in DIR and print their references
  nodewright-site kairos-node --host-root DIR --dir DIR --registry DIR --image REF [--drbd-dir DIR] -- AGENT [ARGS...]
      play a Kairos node's machine (test/site/kairosplay): install REF on the host the first time,
      run the agent on it (--host-proc and --site-kairos-dir added) and again after each played
      reboot, until SIGTERM
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "network":
		err = runNetwork(ctx, os.Args[2:], os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "fault":
		err = runFault(ctx, os.Args[2:], os.Stdout, os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "kairos-image":
		err = runKairosImage(os.Args[2:], os.Stdout, os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "kairos-node":
		err = runKairosNode(ctx, os.Args[2:], os.Stderr)
	default:
		err = run(ctx, os.Args[1:], os.Stderr)
	}
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodewright-site: %v\n", err)
		os.Exit(1)
	}
}

type settings struct {
	kubeconfig, dir, copyBinary, nodeName, drivers, namespaces, nodes string
	mib                                                               int
	// seed, when seeded, keys the fill's data instead of the claim's name.
	seed   uint64
	seeded bool
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "run" && args[0] != "fill") {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return flag.ErrHelp
		}
		return errors.New("say run, fill, network or fault")
	}
	command := args[0]
	var s settings
	fs := flag.NewFlagSet("nodewright-site "+command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	fs.StringVar(&s.dir, "dir", "", "folder of the volumes', snapshots' and pods' files (required)")
	fs.StringVar(&s.drivers, "drivers", "linstor.csi.linbit.com", "CSI drivers the site plays, comma-separated")
	if command == "run" {
		fs.StringVar(&s.copyBinary, "copy-binary", "", "the nodewright-copy executable the data Jobs run (required)")
		fs.StringVar(&s.nodeName, "node-name", site.DefaultNodeName, "the Node the site registers and runs pods on")
		fs.StringVar(&s.namespaces, "namespaces", "", "namespaces to act in, comma-separated; empty for all")
		fs.StringVar(&s.nodes, "nodes", "", "the nodes VMIs run on and live-migrate between, comma-separated, --node-name among them; empty: --node-name alone")
	} else {
		fs.IntVar(&s.mib, "mib", 0, "MiB of pseudo-random data to write at the start of the volume (required)")
		fs.Uint64Var(&s.seed, "seed", 0, "seed of the pseudo-random data; default: one made of the namespace and the claim's name")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { s.seeded = s.seeded || f.Name == "seed" })
	if s.kubeconfig == "" || s.dir == "" {
		return errors.New("--kubeconfig and --dir are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	opts := site.Options{Dir: s.dir, Drivers: strings.Split(s.drivers, ","), CopyBinary: s.copyBinary, NodeName: s.nodeName}
	if s.namespaces != "" {
		opts.Namespaces = strings.Split(s.namespaces, ",")
	}
	if s.nodes != "" {
		opts.Nodes = strings.Split(s.nodes, ",")
	}
	if command == "fill" {
		if fs.NArg() != 2 || s.mib <= 0 {
			return errors.New("fill needs --mib N (N > 0), a namespace and a PVC name")
		}
		// Filling runs no pods; New only needs a path here.
		opts.CopyBinary = "unused"
		key := claimKey(fs.Arg(0), fs.Arg(1))
		if s.seeded {
			key = seedKey(s.seed)
		}
		return fill(ctx, cfg, opts, fs.Arg(0), fs.Arg(1), int64(s.mib)<<20, key)
	}
	if s.copyBinary == "" {
		return errors.New("--copy-binary is required")
	}
	opts.Logger = zap.New(zap.WriteTo(stderr))
	st, err := site.New(cfg, opts)
	if err != nil {
		return err
	}
	go func() {
		if st.Err() == nil {
			opts.Logger.Info("The site runs", "node", st.NodeName(), "dir", st.Dir(), "drivers", opts.Drivers)
		}
	}()
	if err := st.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// claimKey is the key of a claim's data when no seed is given: two claims get different data
// (a copy between them that did nothing is then seen), one claim the same at every fill.
func claimKey(ns, pvc string) [32]byte {
	return sha256.Sum256([]byte("nodewright-site fill\x00" + ns + "\x00" + pvc))
}

// seedKey is the key of --seed S.
func seedKey(seed uint64) [32]byte {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	return key
}

// fill writes n bytes of pseudo-random data, the ChaCha8 stream of key, at the start of the
// claim's volume, once the claim is bound.
func fill(ctx context.Context, cfg *rest.Config, opts site.Options, ns, pvc string, n int64, key [32]byte) error {
	opts.Logger = logr.Discard()
	st, err := site.New(cfg, opts)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := st.BackingFile(ctx, ns, pvc)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("claim %s/%s: %w", ns, pvc, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return st.Fill(ctx, ns, pvc, io.LimitReader(rand.NewChaCha8(key), n))
}
