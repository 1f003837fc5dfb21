package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

const completionHelp = `Write the shell completion script for kubectl-nodewright to standard output.

As a kubectl plugin, "kubectl nodewright <TAB>" completes when an executable named
kubectl_complete-nodewright is on the PATH (kubectl 1.26 or later) that runs
"kubectl-nodewright __complete "$@"" (see docs/cli.md). The scripts below complete the
kubectl-nodewright command itself.

Completion of names (migrations, VMs, storage classes, namespaces) asks the API server, with
the same kubeconfig flags.

Exit codes: 0 written, 2 usage (an unknown shell).`

const completionExamples = `  # bash, for this shell
  source <(kubectl-nodewright completion bash)

  # bash, for good
  kubectl-nodewright completion bash > /etc/bash_completion.d/kubectl-nodewright

  # zsh (with compinit loaded)
  kubectl-nodewright completion zsh > "${fpath[1]}/_kubectl-nodewright"

  # fish
  kubectl-nodewright completion fish > ~/.config/fish/completions/kubectl-nodewright.fish

  # "kubectl nodewright <TAB>" through kubectl's plugin completion
  printf '#!/bin/sh\nexec kubectl-nodewright __complete "$@"\n' > ~/bin/kubectl_complete-nodewright
  chmod +x ~/bin/kubectl_complete-nodewright`

func newCompletionCommand(_ *Factory) *cobra.Command {
	shells := []string{"bash", "zsh", "fish", "powershell"}
	return &cobra.Command{
		Use:       "completion bash|zsh|fish|powershell",
		Short:     "Write the shell completion script",
		Long:      completionHelp,
		Example:   completionExamples,
		ValidArgs: shells,
		Args:      exactArgs(1, "a shell: bash, zsh, fish or powershell"),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			case "powershell":
				return root.GenPowerShellCompletionWithDesc(out)
			}
			return usageErrorf("unknown shell %q: want one of %s", args[0], strings.Join(shells, ", "))
		},
	}
}

// completionTimeout bounds a completion's call to the API server: a shell waits on it.
const completionTimeout = 5 * time.Second

// completeNames lists the names of objects of list (matching prefix) for completion; on any
// error it offers nothing rather than files.
func completeNames(f *Factory, list client.ObjectList, namespaced bool, toComplete string) ([]string, cobra.ShellCompDirective) {
	none := cobra.ShellCompDirectiveNoFileComp
	c, err := f.Client()
	if err != nil {
		return nil, none
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	var opts []client.ListOption
	if namespaced {
		ns, _, err := f.Namespace()
		if err != nil {
			return nil, none
		}
		opts = append(opts, client.InNamespace(ns))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, none
	}
	var names []string
	for _, name := range itemNames(list) {
		if strings.HasPrefix(name, toComplete) {
			names = append(names, name)
		}
	}
	return names, none
}

func itemNames(list client.ObjectList) []string {
	objs, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var names []string
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil {
			names = append(names, m.GetName())
		}
	}
	return names
}

func completeMigrations(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeNames(f, &nwv1.VMVolumeMigrationList{}, true, toComplete)
	}
}

// completeVMs completes the VM (the first argument) from KubeVirt's VirtualMachines, read as
// metadata only so that no KubeVirt types are needed.
func completeVMs(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachineList"})
		return completeNames(f, list, true, toComplete)
	}
}

func completeStorageClasses(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completeNames(f, &storagev1.StorageClassList{}, false, toComplete)
	}
}

func registerNamespaceCompletion(root *cobra.Command, f *Factory) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completeNames(f, &corev1.NamespaceList{}, false, toComplete)
	})
}

// completeWords completes a flag that takes one of words.
func completeWords[T ~string](words []T) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, w := range words {
			if strings.HasPrefix(strings.ToLower(string(w)), strings.ToLower(toComplete)) {
				out = append(out, string(w))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeNodeOrder completes the last node of a comma-separated list of nodes (--order) from
// the cluster's Nodes, read as metadata only, leaving out those the list names already.
func completeNodeOrder(f *Factory) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		before, last := "", toComplete
		if i := strings.LastIndex(toComplete, ","); i >= 0 {
			before, last = toComplete[:i+1], toComplete[i+1:]
		}
		named := strings.Split(before, ",")
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
		nodes, directive := completeNames(f, list, false, last)
		var out []string
		for _, n := range nodes {
			if !slices.Contains(named, n) {
				out = append(out, before+n)
			}
		}
		return out, directive | cobra.ShellCompDirectiveNoSpace
	}
}

// completeClusterNames completes the one argument, the name of a cluster-scoped object of the
// kind newList lists.
func completeClusterNames(f *Factory, newList func() client.ObjectList) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completeNames(f, newList(), false, toComplete)
	}
}
