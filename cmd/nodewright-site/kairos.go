package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/siteagent"
)

// runKairosImage adds Kairos versions to a played registry and prints each image's reference,
// one a line, in the order given: `kairos-image --registry DIR v3.4.2 v3.5.0`. The same
// version gives the same reference (kairosplay.Registry.AddVersion).
func runKairosImage(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodewright-site kairos-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	registry := fs.String("registry", "", "folder of the played registry (required): created if missing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *registry == "" {
		return errors.New("--registry is required")
	}
	if fs.NArg() == 0 {
		return errors.New("name at least one Kairos version (vX.Y.Z)")
	}
	r := kairosplay.Registry{Dir: *registry}
	for _, v := range fs.Args() {
		ref, err := r.AddVersion(v)
		if err != nil {
			return fmt.Errorf("kairos-image: %w", err)
		}
		if _, err := fmt.Fprintln(stdout, ref); err != nil {
			return err
		}
	}
	return nil
}

// kairosNodeSettings are kairos-node's flags.
type kairosNodeSettings struct {
	root, dir, registry, image, drbdDir string
	agent                               []string
}

func parseKairosNode(args []string, stderr io.Writer) (kairosNodeSettings, error) {
	var s kairosNodeSettings
	fs := flag.NewFlagSet("nodewright-site kairos-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.root, "host-root", "", "the node's root files, the agent's --host-root (required)")
	fs.StringVar(&s.dir, "dir", "", "the played host's own folder: its slots, fault hooks and reboot request (required)")
	fs.StringVar(&s.registry, "registry", "", "the played registry of images (required; kairos-image adds to it)")
	fs.StringVar(&s.image, "image", "", "the image installed into every slot when the host was never installed: REPOSITORY:TAG@sha256:<64 hex>, in the registry (required)")
	fs.StringVar(&s.drbdDir, "drbd-dir", "", "the node's played DRBD (the agent's --site-drbd-dir), for the fault that keeps DRBD from reconnecting")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	for _, f := range []struct{ name, value string }{{"--host-root", s.root}, {"--dir", s.dir}, {"--registry", s.registry}, {"--image", s.image}} {
		if f.value == "" {
			return s, fmt.Errorf("%s is required", f.name)
		}
	}
	if _, _, _, err := kairosplay.ParseRef(s.image); err != nil {
		return s, fmt.Errorf("--image: %w", err)
	}
	s.agent = fs.Args()
	if len(s.agent) == 0 {
		return s, errors.New("name the agent's command after the flags: kairos-node FLAGS -- AGENT [ARGS...]")
	}
	for _, a := range s.agent[1:] {
		if name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); strings.HasPrefix(a, "-") && (name == "host-proc" || name == "site-kairos-dir") {
			return s, fmt.Errorf("the agent's %s is kairos-node's to give (the played host's): leave it out", a)
		}
	}
	return s, nil
}

// runKairosNode plays a Kairos node's machine for its agent: the host at --host-root and --dir
// is installed with --image the first time (every slot, the boot assessment's block, a boot),
// then the agent's command runs with --host-proc and --site-kairos-dir of the host added, and
// runs again after each played reboot (siteagent.Run), until SIGTERM, which ends the agent
// with the machine (SIGKILL). The agent's output and the supervision's lines go to stderr. A
// node that does not come back from a reboot, or an agent that ends by itself, ends it too,
// saying so.
func runKairosNode(ctx context.Context, args []string, stderr io.Writer) error {
	s, err := parseKairosNode(args, stderr)
	if err != nil {
		return err
	}
	host := &kairosplay.Host{Root: s.root, Dir: s.dir, Registry: kairosplay.Registry{Dir: s.registry}, DRBDDir: s.drbdDir}
	if id, _ := host.BootID(); id == "" {
		booted, err := host.Install(ctx, s.image)
		if err != nil {
			return fmt.Errorf("installing %s: %w", s.image, err)
		}
		fmt.Fprintf(stderr, "--- installed %s into every slot; booted %s, boot ID %s ---\n", s.image, booted.Entry, booted.BootID)
	} else if asked, err := host.RebootRequested(); err != nil {
		return err
	} else if asked {
		// The machine was asked to restart when the last kairos-node ended: it restarts now.
		booted, err := host.Boot(ctx)
		if err != nil {
			return fmt.Errorf("the reboot asked for before this start: %w", err)
		}
		fmt.Fprintf(stderr, "--- booted %s (%s) boot ID %s, fallback %v ---\n", booted.Entry, booted.Image, booted.BootID, booted.Fallback)
	}
	argv := append(append([]string(nil), s.agent...), "--host-proc", host.Proc(), "--site-kairos-dir", host.Dir)
	node := os.Getenv("NODE_NAME")
	if node == "" {
		node = "the node"
	}
	sup, _, err := siteagent.Run(node, host, func() *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		// The agent goes with its machine: a kairos-node killed outright takes it along.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}, stderr)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return sup.Stop()
	case <-sup.Done():
	}
	switch {
	case sup.Err() != nil:
		return sup.Err()
	case sup.Down():
		return errors.New("the node did not come back from its reboot (the fault hook fault-no-return, or an image that fails to boot with no fallback): no agent runs")
	case sup.Exited() != nil:
		return fmt.Errorf("the agent ended by itself, with no reboot asked for: %w", sup.Exited())
	}
	return errors.New("the agent ended by itself, with no reboot asked for")
}
