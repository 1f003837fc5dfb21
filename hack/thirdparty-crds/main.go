// Command thirdparty-crds turns the CRDs controller-gen derives from kubevirt.io/api/core/v1
// and kubevirt.io/api/snapshot/v1beta1 into faithful stand-ins for the ones KubeVirt's virt-operator installs: the same names,
// short names, categories, subresources and printer columns (pkg/virt-operator/resource/
// generate/components/crds.go in KubeVirt), with the structural schema of the pinned Go types.
// hack/thirdparty-crds.sh runs it; see there.
//
//	thirdparty-crds GENERATED_DIR OUTPUT_DIR KUBEVIRT_API_VERSION
package main

import (
	"fmt"
	"os"
	"path/filepath"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// kind is what KubeVirt's operator sets on one CRD beyond its schema.
type kind struct {
	file       string
	version    string // the one version derived; KubeVirt also serves snapshot.kubevirt.io/v1alpha1
	shortNames []string
	status     bool
	columns    []apiextv1.CustomResourceColumnDefinition
}

var kinds = []kind{
	{
		file:       "kubevirt.io_virtualmachines.yaml",
		version:    "v1",
		shortNames: []string{"vm", "vms"},
		status:     true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Status", Description: "Human Readable Status", Type: "string", JSONPath: ".status.printableStatus"},
			{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
		},
	},
	{
		// virt-handler writes a VMI's status with the object: no status subresource.
		file:       "kubevirt.io_virtualmachineinstances.yaml",
		version:    "v1",
		shortNames: []string{"vmi", "vmis"},
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
			{Name: "IP", Type: "string", JSONPath: ".status.interfaces[0].ipAddress"},
			{Name: "NodeName", Type: "string", JSONPath: ".status.nodeName"},
			{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
			{Name: "Live-Migratable", Type: "string", JSONPath: ".status.conditions[?(@.type=='LiveMigratable')].status", Priority: 1},
			{Name: "Paused", Type: "string", JSONPath: ".status.conditions[?(@.type=='Paused')].status", Priority: 1},
		},
	},
	{
		// The migration controller writes a migration's status through its subresource.
		file:       "kubevirt.io_virtualmachineinstancemigrations.yaml",
		version:    "v1",
		shortNames: []string{"vmim", "vmims"},
		status:     true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "Phase", Description: "The current phase of VM instance migration", Type: "string", JSONPath: ".status.phase"},
			{Name: "VMI", Description: "The name of the VMI to perform the migration on", Type: "string", JSONPath: ".spec.vmiName"},
		},
	},
	{
		// The snapshot controller writes status through the subresource, on all three kinds.
		file:       "snapshot.kubevirt.io_virtualmachinesnapshots.yaml",
		version:    "v1beta1",
		shortNames: []string{"vmsnapshot", "vmsnapshots"},
		status:     true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "SourceKind", Type: "string", JSONPath: ".spec.source.kind"},
			{Name: "SourceName", Type: "string", JSONPath: ".spec.source.name"},
			{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
			{Name: "ReadyToUse", Type: "boolean", JSONPath: ".status.readyToUse"},
			{Name: "CreationTime", Type: "date", JSONPath: ".status.creationTime"},
			{Name: "Error", Type: "string", JSONPath: ".status.error.message"},
		},
	},
	{
		file:       "snapshot.kubevirt.io_virtualmachinesnapshotcontents.yaml",
		version:    "v1beta1",
		shortNames: []string{"vmsnapshotcontent", "vmsnapshotcontents"},
		status:     true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "ReadyToUse", Type: "boolean", JSONPath: ".status.readyToUse"},
			{Name: "CreationTime", Type: "date", JSONPath: ".status.creationTime"},
			{Name: "Error", Type: "string", JSONPath: ".status.error.message"},
		},
	},
	{
		file:       "snapshot.kubevirt.io_virtualmachinerestores.yaml",
		version:    "v1beta1",
		shortNames: []string{"vmrestore", "vmrestores"},
		status:     true,
		columns: []apiextv1.CustomResourceColumnDefinition{
			{Name: "TargetKind", Type: "string", JSONPath: ".spec.target.kind"},
			{Name: "TargetName", Type: "string", JSONPath: ".spec.target.name"},
			{Name: "Complete", Type: "boolean", JSONPath: ".status.complete"},
			{Name: "RestoreTime", Type: "date", JSONPath: ".status.restoreTime"},
			{Name: "Error", Type: "string", JSONPath: ".status.error.message"},
		},
	},
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: thirdparty-crds GENERATED_DIR OUTPUT_DIR KUBEVIRT_API_VERSION")
		os.Exit(2)
	}
	for _, k := range kinds {
		if err := convert(k, os.Args[1], os.Args[2], os.Args[3]); err != nil {
			fmt.Fprintf(os.Stderr, "thirdparty-crds: %s: %v\n", k.file, err)
			os.Exit(1)
		}
	}
}

func convert(k kind, from, to, version string) error {
	raw, err := os.ReadFile(filepath.Join(from, k.file))
	if err != nil {
		return err
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		return err
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != k.version {
		return fmt.Errorf("expected exactly the version %s, found %d versions", k.version, len(crd.Spec.Versions))
	}
	crd.Annotations = map[string]string{
		"nodewright.spectrocloud.com/derived-from": "kubevirt.io/api@" + version + " by hack/thirdparty-crds.sh",
	}
	crd.Labels = map[string]string{"kubevirt.io": ""}
	crd.Spec.Scope = apiextv1.NamespaceScoped
	crd.Spec.Names.ShortNames = k.shortNames
	crd.Spec.Names.Categories = []string{"all"}
	v := &crd.Spec.Versions[0]
	v.Served, v.Storage = true, true
	v.AdditionalPrinterColumns = k.columns
	v.Subresources = nil
	if k.status {
		v.Subresources = &apiextv1.CustomResourceSubresources{Status: &apiextv1.CustomResourceSubresourceStatus{}}
	}
	// Like controller-gen, write neither the CRD's status nor an empty creationTimestamp.
	var doc map[string]any
	if err := convertTo(&crd, &doc); err != nil {
		return err
	}
	delete(doc, "status")
	delete(doc["metadata"].(map[string]any), "creationTimestamp")
	out, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	header := "# Derived from the Go types of kubevirt.io/api " + version + " by hack/thirdparty-crds.sh; do not edit.\n---\n"
	return os.WriteFile(filepath.Join(to, k.file), append([]byte(header), out...), 0o644)
}

// convertTo round-trips in through JSON into out.
func convertTo(in, out any) error {
	raw, err := yaml.Marshal(in)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(raw, out)
}
