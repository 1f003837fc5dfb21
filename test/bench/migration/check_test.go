package main

import (
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lukechampine.com/blake3"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// The byte check is what makes the benchmark fail on a wrong copy: it must see one changed
// byte anywhere, and in the last, short chunk.
func TestSameAsStreamSeesOneChangedByte(t *testing.T) {
	const size = 2*chunk + 4096
	seed := [32]byte{1, 2, 3}
	dir := t.TempDir()
	source, target := filepath.Join(dir, "source"), filepath.Join(dir, "target")
	for _, p := range []string{source, target} {
		if err := createSparse(p, size); err != nil {
			t.Fatal(err)
		}
	}
	digest, err := fill(source, size, seed)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	_, _ = rand.NewChaCha8(seed).Read(data)
	sum := blake3.Sum256(data)
	if want := "blake3:" + hex.EncodeToString(sum[:]); digest != want {
		t.Fatalf("fill's digest %s, want %s", digest, want)
	}
	if err := os.WriteFile(target, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sameAsStream(seed, source, target); err != nil {
		t.Fatalf("equal files: %v", err)
	}
	for _, at := range []int64{0, chunk + 7, size - 1} {
		flip(t, target, at)
		if err := sameAsStream(seed, source, target); err == nil {
			t.Errorf("byte %d of the target changed, and the check passed", at)
		}
		flip(t, target, at)
	}
	if err := os.Truncate(target, size-4096); err != nil {
		t.Fatal(err)
	}
	if err := sameAsStream(seed, source, target); err == nil {
		t.Error("a shorter target passed the check")
	}
}

func flip(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// A step keeps the time it was first seen running and first seen finished; one that finished
// between two events has no running time.
func TestObservationKeepsFirstSightings(t *testing.T) {
	o := &observation{steps: map[string]*stepTimes{}}
	t0 := time.Unix(1000, 0)
	status := func(states ...nwv1.StepState) *nwv1.VMVolumeMigration {
		m := &nwv1.VMVolumeMigration{}
		for i, s := range states {
			m.Status.Steps = append(m.Status.Steps, nwv1.WorkflowStep{Name: []string{"Validate", "Copy"}[i], State: s})
		}
		return m
	}
	o.see(status(nwv1.StepSucceeded, nwv1.StepRunning), t0)
	o.see(status(nwv1.StepSucceeded, nwv1.StepRunning), t0.Add(time.Second))
	o.see(status(nwv1.StepSucceeded, nwv1.StepSucceeded), t0.Add(2*time.Second))
	o.see(status(nwv1.StepSucceeded, nwv1.StepSucceeded), t0.Add(3*time.Second))
	v, c := o.steps["Validate"], o.steps["Copy"]
	if !v.running.IsZero() || !v.done.Equal(t0) {
		t.Errorf("Validate running %v done %v, want never seen running and done at %v", v.running, v.done, t0)
	}
	if !c.running.Equal(t0) || !c.done.Equal(t0.Add(2*time.Second)) {
		t.Errorf("Copy running %v done %v, want %v and %v", c.running, c.done, t0, t0.Add(2*time.Second))
	}
	if len(o.order) != 2 || o.order[0] != "Validate" || o.order[1] != "Copy" {
		t.Errorf("order %v", o.order)
	}
}
