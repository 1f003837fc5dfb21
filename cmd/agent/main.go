// Command agent is the Nodewright node agent, one per node (a DaemonSet): it keeps its node's
// heartbeat Lease, reports its node in its NodewrightAgentStatus (the storage bond, DRBD and the
// OS, read from the host) and runs its node's NodeOperations, for its own node only: DRBD's
// pause-sync, resume-sync, adjust and online verify through drbd-utils, the bond's mode
// under a local checkpoint, and on Kairos an OS upgrade staged, a reboot and the recovery
// system (docs/agent.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/agent"
	drbdutil "github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/kubelite"
	"github.com/spectrocloud/nodewright/internal/netconf"
)

// hostDRBD is how the agent reaches DRBD: drbd-utils on the host, whose kernel module says
// whether there is any (/proc/drbd). A build for the local site may play it (--site-drbd-dir).
var hostDRBD = func(context.Context) (*agent.DRBD, string, error) {
	return &agent.DRBD{Runner: agent.DRBDRunner()}, "", nil
}

// hostRootOfInit is the host's own root file system, whole, as its init (PID 1) sees it: on
// Kairos the agent's pod shares the host's PID namespace (hostPID) and runs privileged, so
// that it may follow this link (CAP_SYS_PTRACE) and chroot into it (CAP_SYS_CHROOT).
const hostRootOfInit = "/proc/1/root"

// onTheHost runs a program on the host itself, in its init's mount, UTS, IPC, network and PID
// namespaces, as system-upgrade-controller's and Kairos's own upgrade pods do (`nsenter -i -m
// -t 1 -- reboot`): with the host's own nsenter, reached by a chroot into hostRootOfInit (the
// agent's image carries no nsenter, and a Go process cannot enter a mount namespace itself).
// The chroot alone would not do: a mount made from it would be in the pod's mount namespace,
// which the kernel refuses on the host's mount points (EINVAL), and kairos-agent mounts.
// nsenter is named by its path in the host's root (util-linux puts it in /usr/bin): a program
// named without one would be looked up in the agent's own image, before the chroot.
var onTheHost = []string{"/usr/bin/nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--"}

// kairosOS is how the agent performs a Kairos node's OS operations: with the host's own
// kairos-agent, grub2-editenv, mount and reboot, run on the host (onTheHost), so that they are
// the host's programs with its libraries, devices and mounts (/dev, /run/initramfs/cos-state),
// not the agent image's, which carries none of them. The records go in the agent's
// --state-dir. The host's systemctl, which reads the systemd units the report names
// (--systemd-units), is run the same way: it asks the host's systemd over its socket in the
// host's /run. A build for the local site (cmd/agent/site.go) plays them.
var kairosOS = func(host hostos.Host, stateDir string) *agent.Kairos {
	runner := agent.TailRunner{Chroot: hostRootOfInit, Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}}
	on := func(program string) []string { return append(slices.Clone(onTheHost), program) }
	return &agent.Kairos{Host: host, StateDir: stateDir, Runner: runner,
		KairosAgent: on("kairos-agent"), GRUBEditenv: on("grub2-editenv"), Systemctl: on("systemctl"),
		AssessmentFile: hostos.KairosAssessmentFile, OEMEnvFile: hostos.KairosOEMEnvFile, Mount: on("mount"),
		// The host's reboot, as Kairos's own upgrade pods reboot a node: it asks the host's
		// init for an orderly reboot and returns.
		Reboot: func(ctx context.Context) error {
			_, err := runner.Run(ctx, on("reboot"))
			return err
		}}
}

// backends are the network backends the agent is built with; the site's played bond is one
// only in a build for the local site (build tag nodewright_site).
var backends = map[string]func() netconf.Backend{
	"netlink": func() netconf.Backend { return netconf.Netlink{} },
}

func osKinds() []string {
	var kinds []string
	for _, p := range hostos.All() {
		kinds = append(kinds, string(p.Kind()))
	}
	return kinds
}

func main() {
	var kubeconfig, node, namespace, hostRoot, hostProc, stateDir, hostOS, network, storageBond, profileKeys string
	var interval, reportInterval time.Duration
	var drbdEvents, kairosOps, systemdUnits bool
	var drbdsetup, procDRBDFlag string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "The kubeconfig file to reach the API server with. Default: $KUBECONFIG, else the in-cluster service account, else ~/.kube/config.")
	flag.StringVar(&node, "node-name", os.Getenv("NODE_NAME"), "The node this agent runs on and acts for (in a DaemonSet, from the downward API: spec.nodeName). Default: $NODE_NAME.")
	flag.StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "The agent's namespace, where its heartbeat Lease and its node's NodeOperations are. Default: $POD_NAMESPACE.")
	flag.DurationVar(&interval, "heartbeat-interval", agent.RenewInterval, "How often the heartbeat Lease is renewed.")
	flag.StringVar(&hostRoot, "host-root", "/", "Where the host's root file system is mounted: the persistent network configuration is written under it, and the OS facts the agent reports (/etc/os-release, /etc/kairos-release, /run/cos) are read there. The kernel's own files are read in /proc.")
	flag.StringVar(&hostProc, "host-proc", "/proc", "Where the kernel's /proc is read: its command line (cmdline) and boot ID (sys/kernel/random/boot_id), the same in every namespace, so a pod's own /proc does.")
	flag.StringVar(&stateDir, "state-dir", "/var/lib/nodewright-agent", "A directory on the host's disk where the agent keeps the checkpoints of its bond changes; it must outlive the agent's container.")
	flag.StringVar(&hostOS, "host-os", string(nwv1.HostOSSystemdNetworkd), fmt.Sprintf("The host's operating system, as an EdgeProfile's spec.os names it (%s): where a bond's mode persists, and what the agent reports of it. Empty: told at start from the files under --host-root (kairos-release or ID=kairos: Kairos; ID=talos: Talos; else SystemdNetworkd).", strings.Join(osKinds(), ", ")))
	flag.StringVar(&network, "network-backend", "netlink", fmt.Sprintf("How the bond is observed and changed: %s.", strings.Join(slices.Sorted(maps.Keys(backends)), ", ")))
	flag.StringVar(&storageBond, "storage-bond", "", "The storage bond the agent reports in its node's NodewrightAgentStatus (e.g. bond0, the EdgeProfile's spec.network.bondInterface); none when empty.")
	flag.StringVar(&profileKeys, "profile-keys-configmap", "nodewright-system/nodewright-profile-keys", "The ConfigMap (namespace/name) of the public keys EdgeProfile signatures are verified with, as the operator's --profile-keys-configmap: the agent verifies the EdgeProfile in force itself and changes a bond only as it allows.")
	flag.DurationVar(&reportInterval, "report-interval", agent.ReportInterval, "How often the host is read for the node's NodewrightAgentStatus (also at once after an operation changed it); the status is written only when what it says changed.")
	flag.BoolVar(&drbdEvents, "drbd-events", true, "Follow DRBD's own announcements of its state changes (drbdsetup events2) and report a change of a connection, disk, role, pause flag or verification within a fraction of a second, rather than at the next --report-interval; started again with a backoff when it stops. The periodic read goes on either way.")
	flag.BoolVar(&kairosOps, "kairos-os-operations", true, "On Kairos: perform the OS operations of an OSVersionPolicy (OSUpgradeStage, Reboot, OSUpgradeRecovery) and of boot recovery (BootAssessmentReset, SelectBootEntry, RecoveryRestage) with the host's own kairos-agent, grub2-editenv and reboot, run on the host through its nsenter (the pod needs hostPID and privileged). False: they fail Unsupported; the boot is reported either way.")
	flag.BoolVar(&systemdUnits, "systemd-units", true, "On Kairos: report the states of the systemd units the BootRecoveryPolicy names (spec.postBootHealth.systemdUnits) in status.os.systemdUnits, read with the host's own systemctl show, run on the host through its nsenter as the OS operations are (the pod needs hostPID and privileged). False: none reported, and the policy finds those units not reported.")
	flag.StringVar(&drbdsetup, "drbdsetup", "", "The drbdsetup program the agent reads DRBD's state with (status and events2); empty: drbdsetup from drbd-utils, found on the host's PATH.")
	flag.StringVar(&procDRBDFlag, "proc-drbd", "", "The file whose presence says the kernel's DRBD module is loaded; empty: /proc/drbd (or the played DRBD's, on the local site).")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Usage: %s [flags]

Runs the Nodewright node agent for one node: it renews the node's heartbeat Lease (named after
the node, in the agent's namespace) every --heartbeat-interval, as the kubelet renews its node
Lease; reads the host every --report-interval (the --storage-bond, DRBD with drbdsetup, the OS
under --host-root), and at once when drbdsetup events2 announces a change of DRBD's state
(--drbd-events), and writes what changed to the node's NodewrightAgentStatus; and runs the
node's NodeOperations (in the agent's namespace, spec.nodeName the node), reporting each one's
outcome in its status. A bond change is made only as the EdgeProfile in force allows (the
NodewrightCluster's spec.profileRef), once the agent has verified its signature with the keys
of --profile-keys-configmap. It reads its kubeconfig from --kubeconfig, $KUBECONFIG, the
in-cluster service account, or ~/.kube/config, in that order. SIGTERM or SIGINT stops it.

Flags:
`, os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	// The log: one JSON object a line on standard error (log/slog), durations as "10s".
	log := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{ReplaceAttr: durationsAsText})).WithName("agent")
	klog.SetLogger(log)
	ctx, stop := signal.NotifyContext(klog.NewContext(context.Background(), log), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if node == "" || namespace == "" {
		fmt.Fprintln(os.Stderr, "--node-name (or $NODE_NAME) and --namespace (or $POD_NAMESPACE) are required")
		os.Exit(2)
	}
	if interval < time.Second {
		fmt.Fprintf(os.Stderr, "--heartbeat-interval %s: must be at least 1s\n", interval)
		os.Exit(2)
	}
	if reportInterval < time.Second {
		fmt.Fprintf(os.Stderr, "--report-interval %s: must be at least 1s\n", reportInterval)
		os.Exit(2)
	}
	if info, err := os.Stat(hostRoot); err != nil || !info.IsDir() {
		fmt.Fprintf(os.Stderr, "--host-root %s: not a folder\n", hostRoot)
		os.Exit(2)
	}
	if info, err := os.Stat(hostProc); err != nil || !info.IsDir() {
		fmt.Fprintf(os.Stderr, "--host-proc %s: not a folder\n", hostProc)
		os.Exit(2)
	}
	host := hostos.Host{Root: hostRoot, Proc: hostProc}
	provider, err := hostProvider(hostOS, host)
	if err != nil {
		fmt.Fprintf(os.Stderr, "--host-os %s: %v\n", hostOS, err)
		os.Exit(2)
	}
	keysNS, keysName, ok := strings.Cut(profileKeys, "/")
	if !ok || keysNS == "" || keysName == "" || strings.Contains(keysName, "/") {
		fmt.Fprintf(os.Stderr, "--profile-keys-configmap %q: must be namespace/name\n", profileKeys)
		os.Exit(2)
	}
	newBackend, ok := backends[network]
	if !ok {
		fmt.Fprintf(os.Stderr, "--network-backend %s: not one of %s\n", network, strings.Join(slices.Sorted(maps.Keys(backends)), ", "))
		os.Exit(2)
	}
	cfg, err := kubelite.Load(kubeconfig)
	if err != nil {
		log.Error(err, "Cannot reach a cluster: no usable kubeconfig")
		os.Exit(1)
	}
	cfg.UserAgent = agent.FieldManager
	client, err := kubelite.New(cfg)
	if err != nil {
		log.Error(err, "Building the client", "kubeconfig", cfg.Source)
		os.Exit(1)
	}
	h := &agent.Heartbeat{Client: client, Node: node, Namespace: namespace, Interval: interval}
	drbd, procDRBD, err := hostDRBD(ctx)
	if err != nil {
		log.Error(err, "Reaching DRBD")
		os.Exit(1)
	}
	net := newBackend()
	// The reporter reads and writes its node's NodewrightAgentStatus straight from the API
	// server.
	if procDRBDFlag != "" {
		procDRBD = procDRBDFlag
	}
	var drbdsetupArgv []string
	if drbdsetup != "" {
		drbdsetupArgv = []string{drbdsetup}
	}
	reporter := &agent.Reporter{Client: client, Node: node, Interval: reportInterval,
		Observer: &agent.HostObserver{Bond: net, BondName: storageBond, DRBD: drbd.Runner, Drbdsetup: drbdsetupArgv, ProcDRBD: procDRBD, OS: provider, Host: host}}

	ops := &agent.Operations{Client: client, Node: node, Namespace: namespace, Recorded: reporter.Trigger}
	bonds := &agent.Bonds{Net: net, OS: provider, HostRoot: hostRoot, StateDir: stateDir, Resolved: ops.Wake,
		Prober: agent.Prober{APIServer: agent.ProbeAPIServer(client.HTTP(), client.URL("")), DRBD: drbd.Runner},
		// Every change is checked against the signed EdgeProfile in force, verified here.
		Profiles: &agent.SignedProfile{Client: client, Keys: types.NamespacedName{Namespace: keysNS, Name: keysName}, StateDir: stateDir}}
	// Before anything reaches the API server, which may be out of reach: a bond change left
	// half made is undone, and an expired checkpoint rolled back.
	if err := bonds.Recover(ctx); err != nil {
		log.Error(err, "Reading the bond checkpoints", "stateDir", stateDir)
		os.Exit(1)
	}
	ops.Executors = agent.Executors(bonds, drbd)
	// On Kairos, its OS operations: an upgrade staged, a reboot, the recovery system; and the
	// report's last fallback, from their records.
	if provider.Kind() == nwv1.HostOSKairos {
		kairos := kairosOS(host, stateDir)
		// Every image is checked against the signed EdgeProfile in force, as bond changes are.
		kairos.Profiles = bonds.Profiles
		if kairosOps {
			maps.Copy(ops.Executors, kairos.Executors())
		}
		reporter.Observer.Kairos = kairos
		if systemdUnits {
			reporter.Observer.Units = &agent.SystemdUnits{Client: client, Runner: kairos.Runner, Systemctl: kairos.Systemctl}
		}
	}
	// A report request on the node's NodewrightAgentStatus (the operator's, to see a peer after
	// a change) is answered at once, with a read of the host made after it.
	parts := []func(context.Context) error{h.Run, reporter.Run, reporter.FollowRequests}
	// DRBD's events ask the reporter for a report as they come, and wake the verifications
	// running, whose end they may announce.
	if streamer, ok := drbd.Runner.(drbdutil.Streamer); ok && drbdEvents {
		events := &agent.DRBDEvents{Streamer: streamer, Drbdsetup: drbdsetupArgv, ProcDRBD: procDRBD, Changed: func() {
			reporter.Trigger()
			for _, key := range drbd.Verifying() {
				ops.Wake(key)
			}
		}}
		parts = append(parts, events.Run)
	}
	log.Info("Agent starting", "node", node, "namespace", namespace, "server", cfg.Host, "kubeconfig", cfg.Source,
		"heartbeatInterval", interval, "reportInterval", reportInterval, "storageBond", storageBond, "hostRoot", hostRoot, "hostProc", hostProc,
		"hostOS", provider.Kind(), "kairosOSOperations", kairosOps && provider.Kind() == nwv1.HostOSKairos,
		"systemdUnits", systemdUnits && provider.Kind() == nwv1.HostOSKairos, "profileKeys", profileKeys, "drbdEvents", drbdEvents)
	// Each part runs until SIGTERM or SIGINT; one that cannot start stops the agent.
	parts = append(parts, ops.Run)
	failed := make(chan error, len(parts))
	var wg sync.WaitGroup
	for _, run := range parts {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				failed <- err
			}
		})
	}
	select {
	case <-ctx.Done():
	case err := <-failed:
		log.Error(err, "Agent stopped")
		os.Exit(1)
	}
	wg.Wait()
	log.Info("Agent stopped")
}

// durationsAsText writes a duration as time.Duration.String does, not as nanoseconds.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// hostProvider is the OS --host-os names, or, when it is empty, the one the host's files say.
func hostProvider(kind string, host hostos.Host) (hostos.Provider, error) {
	if kind == "" {
		return hostos.Detect(host)
	}
	return hostos.ForKind(nwv1.HostOSKind(kind))
}
