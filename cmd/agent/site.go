//go:build nodewright_site

package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"

	"github.com/spectrocloud/nodewright/internal/agent"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/netconf"
	"github.com/spectrocloud/nodewright/test/site/drbdplay"
	"github.com/spectrocloud/nodewright/test/site/kairosplay"
	"github.com/spectrocloud/nodewright/test/site/netsite"
)

// In a build for the local site (go build -tags nodewright_site), the agent can run on the
// site's played bond (test/site/netsite): --network-backend site --site-bond-dir DIR; and on its
// played DRBD (test/site/drbdplay): --site-drbd-dir DIR, as netsite's PlayDRBD writes it. Then
// drbdadm is drbd-utils' own, in its dry-run mode on the played resource files, as the node the
// directory names, and the kernel's state of the resources is played: their connections over
// the storage network, the resync after a connection is found again, the pause flags. The
// played resources follow the directory's resource files, as LINSTOR's satellite writes and
// removes them (netsite's PlaceDRBD): a replica placed on the node or removed while it runs.
// On a played Kairos host (test/site/kairosplay): --site-kairos-dir DIR, the host's folder, its
// root the --host-root: kairos-agent and systemctl show are played in the process (the
// machines the tests run on have no systemd as PID 1), grub-editenv is Debian's own on the
// host's block, and a reboot records its request in DIR and ends the process at once
// (SIGKILL, as a power cycle would), for the site's supervisor (test/site/siteagent) to boot
// the host and start the agent again.
func init() {
	dir := flag.String("site-bond-dir", "", "With --network-backend site: the directory of the node's played bond.")
	backends["site"] = func() netconf.Backend { return netsite.PlayedBond{Dir: *dir} }
	drbdDir := flag.String("site-drbd-dir", "", "The directory of the node's played DRBD (test/site/drbdplay); empty: DRBD on the host.")
	onHost := hostDRBD
	hostDRBD = func(ctx context.Context) (*agent.DRBD, string, error) {
		if *drbdDir == "" {
			return onHost(ctx)
		}
		return playedDRBD(ctx, *drbdDir)
	}
	kairosDir := flag.String("site-kairos-dir", "", "The folder of the node's played Kairos host (test/site/kairosplay), its root the --host-root; empty: Kairos on the host.")
	onHostKairos := kairosOS
	kairosOS = func(host hostos.Host, stateDir string) *agent.Kairos {
		k := onHostKairos(host, stateDir)
		if *kairosDir == "" {
			return k
		}
		parts, err := kairosplay.ForAgent(*kairosDir, host.Root)
		if err != nil {
			fmt.Fprintf(os.Stderr, "--site-kairos-dir %s: %v\n", *kairosDir, err)
			os.Exit(2)
		}
		k.Runner, k.KairosAgent, k.GRUBEditenv, k.Systemctl, k.Reboot = parts.Runner, parts.KairosAgent, parts.GRUBEditenv, parts.Systemctl, parts.Reboot
		// The blocks are the host's files under its root, as the played GRUB writes them: no
		// remount of COS_STATE, and no chroot.
		k.AssessmentFile, k.OEMEnvFile, k.Mount = "", "", nil
		return k
	}
}

// playedDRBD is the node's played DRBD in dir; its connections are played until ctx ends.
func playedDRBD(ctx context.Context, dir string) (*agent.DRBD, string, error) {
	play, err := drbdplay.ReadPlay(dir)
	if err != nil {
		return nil, "", err
	}
	drbdadm, err := exec.LookPath("drbdadm")
	if err != nil {
		drbdadm = "/usr/sbin/drbdadm"
	}
	conf := filepath.Join(dir, drbdplay.ConfigFile)
	real := drbd.ExecRunner{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C",
		"DRBD_DRIVER_VERSION_OVERRIDE=9.2.12", "__DRBD_NODE__=" + play.Self, "FAKE_DRBDSETUP_SHOW=" + os.DevNull}}
	kernel := &drbdplay.Kernel{Real: real, Self: play.Self, FaultDir: dir, ConfigDir: dir}
	kernel.Links = &drbdplay.Links{Self: play.Self, Listen: play.Listen, Peers: play.Peers, Paused: kernel.PausedTowards}
	// The play file's resources are played even without their resource files, as before the
	// kernel followed the files.
	peers := slices.Sorted(maps.Keys(play.Peers))
	for _, r := range play.Resources {
		kernel.AddResource(r, peers...)
	}
	go func() { _ = kernel.Links.Run(ctx) }()
	// The played configuration stands for /proc/drbd: the module is "loaded" while it is there.
	return &agent.DRBD{Runner: kernel, Drbdadm: []string{drbdadm, "-d", "-c", conf}}, conf, nil
}
