package site

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// What a test does with the site's volumes, as if from inside a pod that mounts them.

// BackingFile returns the file behind the claim ns/name, once one of the site's volumes is
// bound to it. It reads from the API server, so a test sees what it just wrote.
func (s *Site) BackingFile(ctx context.Context, ns, name string) (string, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := s.mgr.GetAPIReader().Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pvc); err != nil {
		return "", err
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return "", fmt.Errorf("claim %s/%s is not bound", ns, name)
	}
	pv := &corev1.PersistentVolume{}
	if err := s.mgr.GetAPIReader().Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
		return "", err
	}
	if pv.Spec.CSI == nil || !s.serves(pv.Spec.CSI.Driver) || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return "", fmt.Errorf("claim %s/%s is bound to %s, which is not one of the site's volumes", ns, name, pv.Name)
	}
	return s.files.volume(pv.Spec.CSI.VolumeHandle), nil
}

// Fill writes r at the start of the claim's volume, leaving the bytes after it as they were.
// It fails if r holds more than the volume does.
func (s *Site) Fill(ctx context.Context, ns, name string, r io.Reader) error {
	path, err := s.BackingFile(ctx, ns, name)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	info, err := f.Stat()
	if err != nil {
		return errors.Join(err, f.Close())
	}
	n, err := io.Copy(f, io.LimitReader(r, info.Size()))
	if err == nil && n == info.Size() {
		var extra [1]byte
		if m, _ := r.Read(extra[:]); m > 0 {
			err = fmt.Errorf("claim %s/%s: the data is larger than the volume's %d bytes", ns, name, info.Size())
		}
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// ReadVolume returns the whole content of the claim's volume.
func (s *Site) ReadVolume(ctx context.Context, ns, name string) ([]byte, error) {
	path, err := s.BackingFile(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// Files lists the files the site holds, relative to its folder: volumes/<pv>.img,
// snapshots/<content>.img and pods/<uid>/<file>. Once every claim, snapshot and pod is gone,
// it is empty; anything left is orphaned.
func (s *Site) Files() ([]string, error) { return s.files.list() }
