package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const migrateHelp = `Create a VMVolumeMigration: move volume VOLUME of the KubeVirt VirtualMachine VM (in the
namespace of -n, or the context's) onto a new PVC of StorageClass CLASS, prove the copy
identical with a checksum, and bracket the change with snapshots (docs/migration.md).

The admission webhook fills in what is not given (the mode, Cold unless --hot; the size, the
source's) and may answer with warnings, which are printed as kubectl prints them. A refusal is
printed as the webhook wrote it, naming the field.

With --wait the command follows the migration to its end, as "migrate watch --wait" does, and
its exit code says how it ended.

Exit codes: 0 created (with --wait: Succeeded); 1 refused or failed (with --wait: ended Failed
or RolledBack, or was deleted); 2 usage; 3 --wait ended before the migration did (--timeout,
or interrupted).

A VM named "list" or "watch" is named with "--vm" instead of the first argument.`

const migrateExamples = `  # Move web's volume "root" onto linstor-rwx (Cold: the VM is stopped for the copy)
  kubectl nodewright migrate web root --to linstor-rwx -n apps

  # Keep the VM running while the backend clones the volume, into a bigger PVC
  kubectl nodewright migrate web data --to linstor-rwx --hot --size 200Gi -n apps

  # In a script: wait for the result, exit 0 only if it Succeeded
  kubectl nodewright migrate db root --to linstor-rwx --name db-to-rwx --wait --timeout 2h

  # Follow it later, or list them
  kubectl nodewright migrate watch db-to-rwx
  kubectl nodewright migrate list -A`

// migrateOptions are the flags of migrate.
type migrateOptions struct {
	vm, to, size, accessMode, snapshotClass, name, output string
	hot                                                   bool
	wait                                                  waitOptions
}

func newMigrateCommand(f *Factory) *cobra.Command {
	o := &migrateOptions{}
	cmd := &cobra.Command{
		Use:     "migrate VM VOLUME --to CLASS",
		Short:   "Move a VM's volume to a new PVC (creates a VMVolumeMigration); list and watch migrations",
		Long:    migrateHelp,
		Example: migrateExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			want := 2
			if o.vm != "" {
				want = 1
			}
			if len(args) != want {
				return usageErrorf("%s wants VM VOLUME (or --vm VM VOLUME), got %d arguments", cmd.CommandPath(), len(args))
			}
			return nil
		},
		ValidArgsFunction: completeVMs(f),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMigrate(cmd, f, o, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.to, "to", "", "StorageClass of the new PVC (required).")
	fl.BoolVar(&o.hot, "hot", false, "Hot: clone the volume while the VM runs, then restart it briefly (the guest's writes after the snapshot are not on the target); refused where the backend cannot clone. Default: Cold.")
	fl.StringVar(&o.size, "size", "", "Size of the new PVC, at least the source's (e.g. 200Gi). Default: the source's.")
	fl.StringVar(&o.accessMode, "access-mode", "", "Access mode of the new PVC: ReadWriteMany (RWX, the default) or ReadWriteOnce (RWO).")
	fl.StringVar(&o.snapshotClass, "snapshot-class", "", "VolumeSnapshotClass of the before and after snapshots. Default: the driver's default class.")
	fl.StringVar(&o.name, "name", "", "Name of the VMVolumeMigration. Default: VM-VOLUME- and five random characters.")
	fl.StringVar(&o.vm, "vm", "", "The VM, when its name is also a subcommand's (list, watch); then the only argument is VOLUME.")
	outputFlag(cmd, &o.output, outputTable, outputJSON, outputYAML)
	o.wait.addFlags(cmd, "migration")
	_ = cmd.RegisterFlagCompletionFunc("to", completeStorageClasses(f))
	_ = cmd.RegisterFlagCompletionFunc("access-mode", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"ReadWriteMany", "ReadWriteOnce"}, cobra.ShellCompDirectiveNoFileComp
	})

	cmd.AddCommand(newMigrateListCommand(f), newMigrateWatchCommand(f))
	return cmd
}

// buildMigration turns the arguments and flags into the object to create; mistakes in them are
// usage errors.
func buildMigration(o *migrateOptions, args []string, namespace string) (*nwv1.VMVolumeMigration, error) {
	vm, volume := o.vm, args[len(args)-1]
	if vm == "" {
		vm = args[0]
	}
	if o.to == "" {
		return nil, usageErrorf("--to CLASS is required: the StorageClass of the new PVC")
	}
	m := &nwv1.VMVolumeMigration{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: o.name},
		Spec: nwv1.VMVolumeMigrationSpec{
			VMName: vm, VolumeName: volume,
			Target:            nwv1.MigrationTarget{StorageClassName: o.to},
			SnapshotClassName: o.snapshotClass,
		},
	}
	if o.hot {
		m.Spec.Mode = nwv1.MigrationHot
	}
	if o.size != "" {
		q, err := resource.ParseQuantity(o.size)
		if err != nil {
			return nil, usageErrorf("--size %q: %v", o.size, err)
		}
		if q.Sign() <= 0 {
			return nil, usageErrorf("--size %q: must be greater than zero", o.size)
		}
		m.Spec.Target.Size = &q
	}
	switch strings.ToLower(o.accessMode) {
	case "":
	case "readwritemany", "rwx":
		m.Spec.Target.AccessMode = corev1.ReadWriteMany
	case "readwriteonce", "rwo":
		m.Spec.Target.AccessMode = corev1.ReadWriteOnce
	default:
		return nil, usageErrorf("--access-mode %q: want ReadWriteMany (RWX) or ReadWriteOnce (RWO)", o.accessMode)
	}
	if m.Name == "" {
		m.Name = generatedName(vm, volume)
	}
	if errs := validation.IsDNS1123Subdomain(m.Name); len(errs) > 0 {
		return nil, usageErrorf("--name %q: %s", m.Name, strings.Join(errs, "; "))
	}
	return m, nil
}

// generatedName is VM-PART- and five random characters (VM-VOLUME- for a migration, VM-WORD-
// for a request), shortened to 63 characters so that the names of what the object makes
// (<name>-snapshot, a migration's children) stay readable.
func generatedName(vm, part string) string {
	const maxName, suffix = 63, 6
	prefix := strings.ToLower(vm + "-" + part)
	if len(prefix) > maxName-suffix {
		prefix = strings.TrimRight(prefix[:maxName-suffix], "-.")
	}
	return prefix + "-" + utilrand.String(suffix-1)
}

func runMigrate(cmd *cobra.Command, f *Factory, o *migrateOptions, args []string) error {
	if err := checkOutput(&o.output, outputTable, outputJSON, outputYAML); err != nil {
		return err
	}
	namespace, _, err := f.Namespace()
	if err != nil {
		return err
	}
	m, err := buildMigration(o, args, namespace)
	if err != nil {
		return err
	}
	return createAndFollow(cmd.Context(), f, m, "vmvolumemigration", "migration", o.output, o.wait, func() string { return describeMigration(m) },
		func(ctx context.Context, c client.WithWatch) error {
			return watchMigration(ctx, f, c, namespace, m.Name, o.wait)
		})
}

// describeMigration is one line saying what a migration does, with the defaults the webhook
// filled in.
func describeMigration(m *nwv1.VMVolumeMigration) string {
	s := m.Spec
	mode := string(s.Mode)
	if mode == "" {
		mode = string(nwv1.MigrationCold)
	}
	parts := []string{fmt.Sprintf("VM %s volume %s to class %s", s.VMName, s.VolumeName, s.Target.StorageClassName), mode}
	if s.Target.Size != nil {
		parts = append(parts, s.Target.Size.String())
	}
	if s.Target.AccessMode != "" {
		parts = append(parts, string(s.Target.AccessMode))
	}
	return strings.Join(parts, ", ")
}
