package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/drbd"
	"github.com/spectrocloud/nodewright/internal/hostos"
	"github.com/spectrocloud/nodewright/internal/osimage"
)

// Kairos performs a Kairos node's OS operations (OSUpgradeStage, Reboot, OSUpgradeRecovery,
// and the boot-recovery ones of kairosrepair.go: BootAssessmentReset, SelectBootEntry,
// RecoveryRestage) with Kairos's own tools, and keeps what must outlive a reboot in StateDir: the image it
// staged and the boot it staged it from, the boot a Reboot left, and the last fallback seen.
// What Kairos does and where it says so is in internal/hostos/kairosupgrade.go.
//
//   - OSUpgradeStage reads the boot (boot ID, KAIROS_IMAGE_REPO, entry, the boot-assessment
//     block) into result.boot; clears a stale boot_assessment_tentative=yes, which an assessed
//     boot that never counted as good leaves and which would make the staged image's first boot
//     fall back at once (kairos#4303), saying so in result.clearedAssessment; writes its stage
//     record; then runs `kairos-agent upgrade --source oci:<image>`, which writes the image as
//     the new active system and keeps the running one as passive, the fallback. Running it
//     again stages the same image again.
//   - Reboot writes its reboot record (the operation and the boot ID) and asks the host to
//     reboot. The agent dies with the host, the operation Running; the next boot's agent runs
//     it again: a changed boot ID is Succeeded, with the new boot and the previous boot ID;
//     the same boot ID asks again (the request was lost), every RebootWait until the deadline.
//   - OSUpgradeRecovery runs `kairos-agent upgrade --recovery --source oci:<image>`.
type Kairos struct {
	// Host: Root, the host's files; Proc, its /proc (cmdline, sys/kernel/random/boot_id).
	Host hostos.Host
	// StateDir is the agent's state folder, on the host's disk: the records survive a reboot.
	StateDir string
	// Runner runs kairos-agent, grub2-editenv and mount.
	Runner drbd.Runner
	// KairosAgent is the argv prefix of kairos-agent: {"kairos-agent"} on the host itself.
	KairosAgent []string
	// GRUBEditenv is the argv prefix of grub2-editenv: {"grub2-editenv"} on Kairos.
	GRUBEditenv []string
	// Systemctl is the argv prefix of the host's systemctl, run with Runner: the report's
	// systemd units (SystemdUnits) are read with it; none when empty.
	Systemctl []string
	// AssessmentFile is the boot-assessment block as GRUBEditenv names it; empty: the block
	// under Host.Root (GRUBEditenv runs where the agent does).
	AssessmentFile string
	// OEMEnvFile is the OEM partition's grubenv (/oem/grubenv) as GRUBEditenv names it, where
	// SelectBootEntry sets next_entry; empty: the file under Host.Root.
	OEMEnvFile string
	// Mount, when set, is the argv prefix of mount(8) where GRUBEditenv runs: COS_STATE, which
	// Kairos mounts read-only, is remounted read-write for the edit and read-only after, as
	// Kairos's docs do by hand. Empty: the block is written as it is (a test's folder).
	Mount []string
	// Profiles gives the signed EdgeProfile in force: an image is staged (or written to the
	// recovery system) only if its spec.osImages lists it or its repository.
	Profiles Profiles
	// Reboot asks the host to reboot and returns once it asked.
	Reboot func(ctx context.Context) error
	// RebootWait is how long a Reboot waits for the host to go down before it asks again;
	// 10 minutes when zero.
	RebootWait time.Duration
	Clock      clock.PassiveClock

	mu sync.Mutex // the fallback record, asked
	// asked: when this process asked for each Reboot's reboot; it asks again only after
	// RebootWait, however often the operation is looked at.
	asked map[types.UID]time.Time
}

// The reasons of the Kairos operations' failures.
const (
	// ReasonHostUnreadable: the host's boot could not be read (the boot ID, kairos-release, the
	// boot-assessment block).
	ReasonHostUnreadable = "HostUnreadable"
	// ReasonAssessmentNotCleared: the stale boot-assessment flag is still set after the edit.
	ReasonAssessmentNotCleared = "AssessmentNotCleared"
	// ReasonRebootedSinceStaged: an OSUpgradeStage run again finds the node booted since it
	// began: it does not stage again.
	ReasonRebootedSinceStaged = "RebootedSinceStaged"
	// ReasonRecordFailed: a record could not be written to the state folder.
	ReasonRecordFailed = "RecordFailed"
	// ReasonNotRebooted: the host did not reboot before the operation's deadline.
	ReasonNotRebooted = "NotRebooted"
	// ReasonBootWouldFallBack: a Reboot refused, the host's boot assessment armed to fall
	// back at its next boot.
	ReasonBootWouldFallBack = "BootWouldFallBack"
)

// imagePattern is the API's pattern of an image pinned by digest (OSImageOperation.image),
// checked again here because a command line is the last place a name can go wrong.
var imagePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*:[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}@sha256:[a-f0-9]{64}$`)

// Executors are the Kairos operations k performs.
func (k *Kairos) Executors() map[nwv1.NodeOperationType]Executor {
	return map[nwv1.NodeOperationType]Executor{
		nwv1.OperationOSUpgradeStage:    kairosStage{k},
		nwv1.OperationReboot:            kairosReboot{k},
		nwv1.OperationOSUpgradeRecovery: kairosRecovery{k},
		// The boot-recovery operations (kairosrepair.go).
		nwv1.OperationBootAssessmentReset: kairosAssessmentReset{k},
		nwv1.OperationSelectBootEntry:     kairosSelectEntry{k},
		nwv1.OperationRecoveryRestage:     kairosRestage{k},
	}
}

func (k *Kairos) now() time.Time {
	if k.Clock == nil {
		return time.Now()
	}
	return k.Clock.Now()
}

// image is the operation's image, checked.
func image(op *nwv1.NodeOperation, spec *nwv1.OSImageOperation) (string, error) {
	if spec == nil {
		return "", errMissing(op)
	}
	if len(spec.Image) > 512 || !imagePattern.MatchString(spec.Image) {
		return "", &OperationError{Reason: ReasonInvalidOperation, Message: fmt.Sprintf("the image %q is not REPOSITORY:TAG@sha256:<64 hex digits>", clip(spec.Image, 600))}
	}
	return spec.Image, nil
}

// allowed says why img may not be staged, nil when it may: the signed EdgeProfile in force
// lists it, or its repository (internal/osimage), whatever the operator asked.
func (k *Kairos) allowed(ctx context.Context, field, img string) error {
	if k.Profiles == nil {
		return &OperationError{Reason: ReasonNoProfile, Message: "this agent has no EdgeProfile to check an OS image against"}
	}
	p, err := k.Profiles.InForce(ctx)
	if err != nil {
		return err
	}
	if why := osimage.Allowed(p, img); why != "" {
		return &OperationError{Reason: ReasonNotAllowed, Message: field + ": " + why}
	}
	return nil
}

// kairosStage is OSUpgradeStage.
type kairosStage struct{ k *Kairos }

func (kairosStage) Resumable() bool { return true }

func (e kairosStage) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	k := e.k
	img, err := image(op, op.Spec.OSUpgradeStage)
	if err != nil {
		return nil, err
	}
	if err := k.allowed(ctx, "spec.osUpgradeStage.image", img); err != nil {
		return nil, err
	}
	boot, err := k.readBoot()
	if err != nil {
		return nil, err
	}
	return k.stage(ctx, op, img, boot)
}

// stage stages img from boot, as OSUpgradeStage and RecoveryRestage do: not again after a
// boot since op began; a stale boot_assessment_tentative=yes cleared first; the stage record;
// then kairos-agent upgrade --source oci:<img>.
func (k *Kairos) stage(ctx context.Context, op *nwv1.NodeOperation, img string, boot hostos.KairosBoot) (*nwv1.NodeOperationResult, error) {
	// Run again after the agent stopped: a host that booted since this operation staged its
	// image is not staged again (kairos-agent would copy the running system over the passive
	// one, the fallback).
	var was stageRecord
	if found, err := k.load(stageRecordFile, &was); err == nil && found && was.Operation == op.UID && was.FromBootID != boot.BootID {
		return &nwv1.NodeOperationResult{Boot: bootObservation(boot)}, &OperationError{Reason: ReasonRebootedSinceStaged, Message: fmt.Sprintf(
			"the node booted again (boot %s) since this operation began staging %s at boot %s: it is not staged again; it runs %s",
			boot.BootID, was.Image, was.FromBootID, boot.Image)}
	}
	result := &nwv1.NodeOperationResult{Boot: bootObservation(boot)}
	if v, _ := boot.Assessment.Get(hostos.GRUBBootAssessmentTentative); v == "yes" {
		if err := k.editAssessment(ctx, "set", hostos.GRUBBootAssessmentTentative+"="); err != nil {
			return result, err
		}
		after, err := k.readBoot()
		if err != nil {
			return result, err
		}
		if v, _ := after.Assessment.Get(hostos.GRUBBootAssessmentTentative); v == "yes" {
			return result, &OperationError{Reason: ReasonAssessmentNotCleared, Message: fmt.Sprintf(
				"%s=yes is still set in %s after grub2-editenv cleared it", hostos.GRUBBootAssessmentTentative, hostos.KairosAssessmentFile)}
		}
		result.ClearedAssessment = []string{hostos.GRUBBootAssessmentTentative + "=yes"}
	}
	rec := stageRecord{Operation: op.UID, Image: img, FromBootID: boot.BootID, FromImage: boot.Image, At: metav1.NewTime(k.now())}
	if err := k.save(stageRecordFile, rec); err != nil {
		return result, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("writing the stage record: %v", err)}
	}
	argv := append(append([]string{}, k.KairosAgent...), "upgrade", "--source", "oci:"+img)
	if _, err := k.Runner.Run(ctx, argv); err != nil {
		return result, commandFailed(err)
	}
	return result, nil
}

// editAssessment runs grub2-editenv on the boot-assessment block with args (set NAME=VALUE...),
// as Kairos's docs clear its flags, COS_STATE remounted read-write around it when Mount says
// how.
func (k *Kairos) editAssessment(ctx context.Context, args ...string) (err error) {
	if len(k.Mount) > 0 {
		if _, err := k.Runner.Run(ctx, append(append([]string{}, k.Mount...), "-o", "rw,remount", hostos.KairosStateMount)); err != nil {
			return commandFailed(err)
		}
		defer func() {
			if _, rerr := k.Runner.Run(context.WithoutCancel(ctx), append(append([]string{}, k.Mount...), "-o", "ro,remount", hostos.KairosStateMount)); rerr != nil && err == nil {
				err = commandFailed(rerr)
			}
		}()
	}
	argv := append(append(append([]string{}, k.GRUBEditenv...), k.assessmentFile()), args...)
	if _, err := k.Runner.Run(ctx, argv); err != nil {
		return commandFailed(err)
	}
	return nil
}

// assessmentFile is the boot-assessment block as GRUBEditenv names it.
func (k *Kairos) assessmentFile() string {
	if k.AssessmentFile != "" {
		return k.AssessmentFile
	}
	return filepath.Join(k.Host.Root, hostos.KairosAssessmentFile)
}

// kairosRecovery is OSUpgradeRecovery.
type kairosRecovery struct{ k *Kairos }

func (kairosRecovery) Resumable() bool { return true }

func (e kairosRecovery) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	img, err := image(op, op.Spec.OSUpgradeRecovery)
	if err != nil {
		return nil, err
	}
	if err := e.k.allowed(ctx, "spec.osUpgradeRecovery.image", img); err != nil {
		return nil, err
	}
	argv := append(append([]string{}, e.k.KairosAgent...), "upgrade", "--recovery", "--source", "oci:"+img)
	if _, err := e.k.Runner.Run(ctx, argv); err != nil {
		return nil, commandFailed(err)
	}
	return &nwv1.NodeOperationResult{}, nil
}

// kairosReboot is Reboot.
type kairosReboot struct{ k *Kairos }

func (kairosReboot) Resumable() bool { return true }

// Holds: the operation's reboot record is there, so it ends as the boot says, even past its
// deadline: a node that rebooted while its agent was down has done it.
func (e kairosReboot) Holds(op *nwv1.NodeOperation) bool {
	var rec rebootRecord
	ok, err := e.k.load(rebootRecordFile, &rec)
	return err == nil && ok && rec.Operation == op.UID
}

func (e kairosReboot) Run(ctx context.Context, op *nwv1.NodeOperation) (*nwv1.NodeOperationResult, error) {
	k := e.k
	log := klog.FromContext(ctx)
	if k.Reboot == nil {
		return nil, &OperationError{Reason: ReasonUnsupported, Message: "this agent has no way to reboot its host"}
	}
	bootID, err := k.Host.BootID()
	if err == nil && bootID == "" {
		err = errors.New("the kernel has no /proc/sys/kernel/random/boot_id")
	}
	if err != nil {
		return nil, &OperationError{Reason: ReasonHostUnreadable, Message: err.Error()}
	}
	var rec rebootRecord
	found, err := k.load(rebootRecordFile, &rec)
	if err != nil {
		return nil, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("reading the reboot record: %v", err)}
	}
	switch {
	case !found || rec.Operation != op.UID:
		// Before the first request: a boot assessment armed with a boot that never counted
		// as good makes GRUB fall back at once (kairos#4303); the host is not rebooted into it.
		if boot, err := k.readBoot(); err != nil {
			return nil, err
		} else if why := armedToFallBack(boot); why != "" {
			return &nwv1.NodeOperationResult{Boot: bootObservation(boot)}, &OperationError{Reason: ReasonBootWouldFallBack, Message: why}
		}
		rec = rebootRecord{Operation: op.UID, BootID: bootID, At: metav1.NewTime(k.now())}
		if err := k.save(rebootRecordFile, rec); err != nil {
			return nil, &OperationError{Reason: ReasonRecordFailed, Message: fmt.Sprintf("writing the reboot record: %v", err)}
		}
	case rec.BootID != bootID:
		boot, err := k.readBoot()
		if err != nil {
			return nil, err
		}
		log.Info("The host rebooted", "previousBootID", rec.BootID, "bootID", boot.BootID)
		return &nwv1.NodeOperationResult{Boot: bootObservation(boot), PreviousBootID: rec.BootID}, nil
	case !k.now().Before(op.Spec.Deadline.Time):
		return nil, &OperationError{Reason: ReasonNotRebooted, Message: fmt.Sprintf(
			"the host did not reboot before the deadline %s: its boot ID is still %s", op.Spec.Deadline.UTC().Format(time.RFC3339), bootID)}
	default:
		if at, ok := k.askedAt(op.UID); ok && k.now().Before(at.Add(k.rebootWait())) {
			return nil, &Pending{Until: at.Add(k.rebootWait())}
		}
		log.Info("The host has not rebooted since the reboot was asked for: asking again", "bootID", bootID, "askedAt", rec.At.UTC())
	}
	reason := ""
	if op.Spec.Reboot != nil {
		reason = op.Spec.Reboot.Reason
	}
	log.Info("Asking the host to reboot", "bootID", bootID, "reason", reason)
	if err := k.Reboot(ctx); err != nil {
		return nil, commandFailed(fmt.Errorf("asking the host to reboot: %w", err))
	}
	now := k.now()
	k.markAsked(op.UID, now)
	return nil, &Pending{Until: now.Add(k.rebootWait())}
}

// armedToFallBack says why the host's next boot would fall back, as Kairos's GRUB
// configuration decides it: boot_assessment_tentative=yes (the last assessed boot never counted
// as good) with enable_boot_assessment or enable_boot_assessment_always yes. Empty when it
// would not.
func armedToFallBack(b hostos.KairosBoot) string {
	a := b.AssessmentStatus()
	if !a.WouldFallBack() {
		return ""
	}
	return fmt.Sprintf("the host's next boot would fall back at once: its boot assessment %s has %s=yes with %s=%t and %s=%t, so GRUB would boot the passive slot (kairos#4303); the host was not rebooted. A person clears the flag (grub2-editenv %s set %s=) once they know why the last boot never counted as good",
		hostos.KairosAssessmentFile, hostos.GRUBBootAssessmentTentative, hostos.GRUBEnableBootAssessment, a.Enabled,
		hostos.GRUBEnableBootAssessmentAlways, a.Always, hostos.KairosAssessmentFile, hostos.GRUBBootAssessmentTentative)
}

func (k *Kairos) rebootWait() time.Duration {
	if k.RebootWait <= 0 {
		return 10 * time.Minute
	}
	return k.RebootWait
}

func (k *Kairos) askedAt(uid types.UID) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.asked[uid]
	return at, ok
}

func (k *Kairos) markAsked(uid types.UID, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.asked == nil {
		k.asked = map[types.UID]time.Time{}
	}
	k.asked[uid] = at
}

// readBoot reads the host's boot; an operation needs its boot ID.
func (k *Kairos) readBoot() (hostos.KairosBoot, error) {
	boot, err := k.Host.ReadKairosBoot()
	if err == nil && boot.BootID == "" {
		err = errors.New("the kernel has no /proc/sys/kernel/random/boot_id")
	}
	if err != nil {
		return boot, &OperationError{Reason: ReasonHostUnreadable, Message: err.Error()}
	}
	return boot, nil
}

// bootObservation is what the API says of a boot, within its bounds: at most 16 variables of
// the boot-assessment block, each NAME=VALUE cut to 256 bytes.
func bootObservation(b hostos.KairosBoot) *nwv1.BootObservation {
	obs := &nwv1.BootObservation{BootID: clip(b.BootID, 64), Image: clip(b.Image, 512), Entry: b.Entry}
	for _, v := range b.Assessment {
		if len(obs.GRUBEnv) == 16 {
			break
		}
		obs.GRUBEnv = append(obs.GRUBEnv, clip(v.Name+"="+v.Value, 256))
	}
	return obs
}

// commandFailed fails an operation with a command's error, quoting the end of what it wrote
// to standard error (or, when it wrote nothing there, to standard output): where a failing
// program says why.
func commandFailed(err error) error {
	var cmdErr *drbd.CommandError
	if !errors.As(err, &cmdErr) {
		return &OperationError{Reason: ReasonCommandFailed, Message: err.Error()}
	}
	msg := fmt.Sprintf("%s: %v", strings.Join(cmdErr.Argv, " "), cmdErr.Err)
	if tail := quoteTail(cmdErr.Stderr); tail != "" {
		msg += ": " + tail
	}
	return &OperationError{Reason: ReasonCommandFailed, Message: msg}
}

// maxQuotedTail is how much of a command's output a failure quotes.
const maxQuotedTail = 768

// quoteTail makes the end of out one line of at most maxQuotedTail bytes.
func quoteTail(out []byte) string {
	text := strings.ToValidUTF8(strings.TrimSpace(string(out)), "?")
	text = strings.Join(strings.Fields(strings.ReplaceAll(text, "\n", " ; ")), " ")
	if len(text) <= maxQuotedTail {
		return text
	}
	cut := len(text) - maxQuotedTail
	for cut < len(text) && (text[cut]&0xC0) == 0x80 {
		cut++
	}
	return fmt.Sprintf("(%d bytes before) ...%s", cut, text[cut:])
}

// The records in StateDir.

const (
	stageRecordFile    = "kairos-stage.json"
	rebootRecordFile   = "kairos-reboot.json"
	fallbackRecordFile = "kairos-fallback.json"
)

// stageRecord is the last image staged, and the boot it was staged from.
type stageRecord struct {
	Operation  types.UID   `json:"operation"`
	Image      string      `json:"image"`
	FromBootID string      `json:"fromBootID"`
	FromImage  string      `json:"fromImage,omitempty"`
	At         metav1.Time `json:"at"`
}

// rebootRecord is the last Reboot asked for, and the boot it was asked from.
type rebootRecord struct {
	Operation types.UID   `json:"operation"`
	BootID    string      `json:"bootID"`
	At        metav1.Time `json:"at"`
}

// maxRecordBytes bounds a record read from StateDir.
const maxRecordBytes = 64 << 10

func (k *Kairos) save(name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return hostos.WriteFileAtomic(filepath.Join(k.StateDir, name), data, 0o600)
}

// load reads a record into v; found is false when there is none.
func (k *Kairos) load(name string, v any) (found bool, err error) {
	path := filepath.Join(k.StateDir, name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxRecordBytes+1))
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxRecordBytes {
		return false, fmt.Errorf("%s: more than %d bytes", path, maxRecordBytes)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// LastFallback is the last boot that fell back from an image this agent staged: when the stage
// record names a boot other than this one and this boot is a fallback (upgrade_failure), it is
// this boot, recorded the first time it is seen; else the one recorded before, so that later
// boots still report it. nil when there was none.
func (k *Kairos) LastFallback(bootID string, upgradeFailure bool, bootedImage string) (*nwv1.KairosFallback, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var last nwv1.KairosFallback
	found, err := k.load(fallbackRecordFile, &last)
	if err != nil {
		return nil, fmt.Errorf("the last fallback: %w", err)
	}
	var prev *nwv1.KairosFallback
	if found {
		prev = &last
	}
	if bootID == "" || !upgradeFailure || (prev != nil && prev.BootID == bootID) {
		return prev, nil
	}
	var stage stageRecord
	staged, err := k.load(stageRecordFile, &stage)
	if err != nil {
		return prev, fmt.Errorf("the last fallback: %w", err)
	}
	if !staged || stage.FromBootID == bootID {
		return prev, nil
	}
	fb := &nwv1.KairosFallback{FromImage: clip(stage.Image, 512), ToImage: clip(bootedImage, 512), BootID: clip(bootID, 64), SeenAt: metav1.NewTime(k.now().Truncate(time.Second))}
	if err := k.save(fallbackRecordFile, fb); err != nil {
		return fb, fmt.Errorf("recording the fallback: %w", err)
	}
	return fb, nil
}
