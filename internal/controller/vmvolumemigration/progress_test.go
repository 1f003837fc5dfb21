package vmvolumemigration_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/controller/vmvolumemigration"
	"github.com/spectrocloud/nodewright/internal/migration"
	"github.com/spectrocloud/nodewright/test/site"
)

// TestProgressIsReadFromTheJobsLog runs the data Job the controller builds and reads its
// progress the way a person's tools do (kubectl nodewright migrate watch, the web UI): from
// the pod's log, through the API server, with the person's credentials.
func TestProgressIsReadFromTheJobsLog(t *testing.T) {
	f := newFixture(t, site.Options{})
	f.createVolume("copy-target", linstorClass)
	// No operator runs here: the migration only owns the Job.
	m := f.migration("progress", nwv1.MigrationCold, linstorClass)
	f.create(m)
	job := vmvolumemigration.DataJob(m, "progress-copy", "nodewright-copy:test", "copy", "web-root", "copy-target")
	f.create(job)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f.eventually(func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false, err.Error()
		}
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("Job not complete: %+v", job.Status)
	})
	p, err := migration.ReadCopyProgress(ctx, cs, job.Namespace, job.Name)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil || p.BytesDone != volumeSize || p.BytesTotal != volumeSize {
		t.Fatalf("progress read from the log: %+v, want %d of %d bytes", p, volumeSize, volumeSize)
	}
	if !bytes.Equal(f.volumeBytes("copy-target"), f.source) {
		t.Error("the Job did not copy the bytes")
	}
}
