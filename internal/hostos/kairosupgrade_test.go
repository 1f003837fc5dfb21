package hostos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const testBootID = "4f0c3b9e-52a1-4c7e-9d2b-6a1e0f3c8d77"

// withAssessment writes the boot-assessment block into h with the real grub-editenv, set with
// each of sets (NAME=VALUE) in turn.
func withAssessment(t *testing.T, h Host, sets ...string) {
	t.Helper()
	tool := grubEditenv(t)
	file := filepath.Join(h.Root, kairosAssessmentPath)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	editenv(t, tool, file, "create")
	for _, s := range sets {
		editenv(t, tool, file, "set", s)
	}
}

func TestReadKairosBoot(t *testing.T) {
	release := sample(t, "kairos-release-ubuntu-24.04-standard") + "KAIROS_IMAGE_REPO=\"quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2-k3sv1.32.4-k3s1\"\n"
	const image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.4.2-k3sv1.32.4-k3s1"
	passiveFallback := passiveCmdline + " upgrade_failure"
	for _, tc := range []struct {
		name       string
		tree       tree
		assessment []string // grub-editenv sets; nil: no block
		want       KairosBoot
		wantAssess *nwv1.KairosBootAssessment
		err        string
	}{
		{"active, no block", tree{"etc/kairos-release": release, "run/cos/active_mode": "", "proc/cmdline": activeCmdline,
			"proc/sys/kernel/random/boot_id": testBootID + "\n"}, nil,
			KairosBoot{BootID: testBootID, Image: image, Entry: nwv1.KairosBootActive}, nil, ""},
		{"staged: the next boot assessed", tree{"etc/kairos-release": release, "run/cos/active_mode": "", "proc/cmdline": activeCmdline,
			"proc/sys/kernel/random/boot_id": testBootID + "\n"}, []string{"enable_boot_assessment=yes"},
			KairosBoot{BootID: testBootID, Image: image, Entry: nwv1.KairosBootActive, HasAssessment: true,
				Assessment: GRUBEnv{{"enable_boot_assessment", "yes"}}}, &nwv1.KairosBootAssessment{Enabled: true}, ""},
		// GRUB found the flag it had set still there: the fallback, with its sentinel.
		{"a fallback", tree{"etc/kairos-release": release, "run/cos/passive_mode": "", "run/cos/upgrade_failure": "", "proc/cmdline": passiveFallback,
			"proc/sys/kernel/random/boot_id": testBootID}, []string{"enable_boot_assessment=yes", "boot_assessment_tentative=yes"},
			KairosBoot{BootID: testBootID, Image: image, Entry: nwv1.KairosBootPassive, UpgradeFailure: true, HasAssessment: true,
				Assessment: GRUBEnv{{"enable_boot_assessment", "yes"}, {"boot_assessment_tentative", "yes"}}},
			&nwv1.KairosBootAssessment{Enabled: true, Tentative: true}, ""},
		{"a fallback said by the command line alone", tree{"etc/kairos-release": release, "proc/cmdline": passiveFallback,
			"proc/sys/kernel/random/boot_id": testBootID}, nil,
			KairosBoot{BootID: testBootID, Image: image, Entry: nwv1.KairosBootPassive, UpgradeFailure: true}, nil, ""},
		{"the sentinel alone", tree{"etc/kairos-release": release, "run/cos/upgrade_failure": "", "proc/cmdline": passiveCmdline}, nil,
			KairosBoot{Image: image, Entry: nwv1.KairosBootPassive, UpgradeFailure: true}, nil, ""},
		{"every boot assessed, cleared", tree{"etc/kairos-release": release, "proc/cmdline": activeCmdline},
			[]string{"enable_boot_assessment_always=yes", "boot_assessment_tentative=yes", "boot_assessment_tentative="},
			KairosBoot{Image: image, Entry: nwv1.KairosBootActive, HasAssessment: true,
				Assessment: GRUBEnv{{"enable_boot_assessment_always", "yes"}, {"boot_assessment_tentative", ""}}},
			&nwv1.KairosBootAssessment{Always: true}, ""},
		{"a bad boot ID", tree{"etc/kairos-release": release, "proc/cmdline": activeCmdline, "proc/sys/kernel/random/boot_id": "not-a-uuid\n"}, nil,
			KairosBoot{Image: image, Entry: nwv1.KairosBootActive}, nil, `the boot ID: /proc/sys/kernel/random/boot_id holds "not-a-uuid", not a UUID`},
		{"a broken block", tree{"etc/kairos-release": release, "proc/cmdline": activeCmdline,
			"run/initramfs/cos-state/boot_assessment": "enable_boot_assessment=yes\n"}, nil,
			KairosBoot{Image: image, Entry: nwv1.KairosBootActive}, nil, "the boot assessment /run/initramfs/cos-state/boot_assessment: GRUB environment block, at byte 0: it does not start with GRUB's signature"},
		{"a block too large", tree{"etc/kairos-release": release, "proc/cmdline": activeCmdline,
			"run/initramfs/cos-state/boot_assessment": GRUBEnvSignature + strings.Repeat("#", MaxGRUBEnvBytes)}, nil,
			KairosBoot{Image: image, Entry: nwv1.KairosBootActive}, nil, "the boot assessment: run/initramfs/cos-state/boot_assessment: more than 65536 bytes"},
		{"no upgrade failure after --", tree{"etc/kairos-release": release, "proc/cmdline": activeCmdline + " -- upgrade_failure"}, nil,
			KairosBoot{Image: image, Entry: nwv1.KairosBootActive}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.tree.build(t)
			if tc.assessment != nil {
				withAssessment(t, h, tc.assessment...)
			}
			got, err := h.ReadKairosBoot()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("ReadKairosBoot: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("ReadKairosBoot error %v; want one containing %q", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ReadKairosBoot =\n %+v\nwant\n %+v", got, tc.want)
			}
			if a := got.AssessmentStatus(); !reflect.DeepEqual(a, tc.wantAssess) {
				t.Errorf("AssessmentStatus = %+v; want %+v", a, tc.wantAssess)
			}
			// Facts say the same.
			facts, _ := Kairos{}.Facts(h)
			if facts.BootID != tc.want.BootID || facts.Kairos.Image != tc.want.Image || facts.Kairos.UpgradeFailure != tc.want.UpgradeFailure ||
				!reflect.DeepEqual(facts.Kairos.BootAssessment, tc.wantAssess) {
				t.Errorf("Facts = %+v %+v; want the boot read", facts, facts.Kairos)
			}
		})
	}
}

// TestBootIDOfThisMachine reads this kernel's boot ID, as the agent does, and every OS reports it.
func TestBootIDOfThisMachine(t *testing.T) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("this kernel has no boot ID: %v", err)
	}
	want := strings.TrimSpace(string(data))
	got, err := Host{Root: "/"}.BootID()
	if err != nil || got != want {
		t.Errorf("BootID = %q, %v; want %q", got, err, want)
	}
	for _, p := range All() {
		facts, _ := p.Facts(Host{Root: "/"})
		if facts.BootID != want {
			t.Errorf("%s.Facts boot ID = %q; want %q", p.Name(), facts.BootID, want)
		}
	}
	if id, err := (Host{Root: "/", Proc: t.TempDir()}).BootID(); id != "" || err != nil {
		t.Errorf("BootID with no boot_id = %q, %v; want nothing said", id, err)
	}
}
