package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spectrocloud/nodewright/internal/audit"
)

const auditHelp = `Work with Nodewright's tamper-evident audit trail (docs/audit.md): verify it, or follow it
as it grows.`

func newAuditCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Verify or follow the audit trail",
		Long:  auditHelp,
		Example: `  kubectl nodewright audit verify --public-key audit.pub /var/lib/nodewright/audit
  kubectl nodewright audit tail -f /var/lib/nodewright/audit`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAuditVerifyCommand(f), newAuditTailCommand(f))
	return cmd
}

const verifyHelp = `Verify an audit trail: every entry's hash, the chain's links, sequence numbers, record IDs
and the signature of every checkpoint, as nodewright-audit verify does (the same library
call). Files are read in the order given; a directory stands for its audit-*.jsonl files in
order.

Entries after the last checkpoint are protected by the hash chain only: deleting or rewriting
them cannot be told from the trail alone. --trusted-checkpoint (a checkpoint line kept outside
the trail, e.g. from the ConfigMap the operator publishes it to) requires the trail to still
reach it, which detects that: a shorter trail is truncated. With --allow-partial, a trail that
starts after the trusted checkpoint (its oldest files removed) only gets a note that the
checkpoint was not checked. An empty trail file verifies (a new trail is one): only a trusted
checkpoint tells a wiped trail from a new one.

The report lists each problem as "FAIL file:line seq N: kind: message" ("seq ?" when the line
is too damaged to tell; for truncated, the line just after the end of the last file), at most
1000 of them, then notes (the first one counts the problems not listed), the last checkpoint
and a summary; -o json and -o yaml print the report as data.

Exit codes: 0 the trail verifies; 1 tampering or damage found; 2 usage or bad input (no key,
an unreadable file or key, a trusted checkpoint that is not one).`

const verifyExamples = `  # A trail folder, with the operator's public key
  kubectl nodewright audit verify --public-key audit.pub /var/lib/nodewright/audit

  # Across a key rotation, and against the checkpoint published outside the trail
  kubectl get cm -n nodewright-system nodewright-audit-checkpoint -o jsonpath='{.data.checkpoint\.jsonl}' > checkpoint.jsonl
  kubectl nodewright audit verify --public-key old.pub --public-key new.pub --trusted-checkpoint checkpoint.jsonl audit-*.jsonl

  # For a script
  kubectl nodewright audit verify --public-key audit.pub -o json trail/ | jq .problems`

func newAuditVerifyCommand(f *Factory) *cobra.Command {
	var keyFiles []string
	var trustedFile, output string
	var allowPartial bool
	cmd := &cobra.Command{
		Use:     "verify FILE|DIR...",
		Short:   "Verify an audit trail's chain and signed checkpoints",
		Long:    verifyHelp,
		Example: verifyExamples,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("%s wants the trail's files or folder", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if err := checkOutput(&output, outputTable, outputJSON, outputYAML); err != nil {
				return err
			}
			if len(keyFiles) == 0 {
				return usageErrorf("--public-key is required: without it the checkpoints prove nothing")
			}
			opts := audit.VerifyOptions{AllowPartial: allowPartial}
			keys, err := audit.ReadPublicKeys(keyFiles)
			if err != nil {
				return usageError(err)
			}
			opts.PublicKeys = keys
			if trustedFile != "" {
				if opts.Trusted, err = audit.ReadTrustedCheckpoint(trustedFile); err != nil {
					return usageError(err)
				}
			}
			files, err := audit.ExpandChainFiles(args)
			if err != nil {
				return usageError(err)
			}
			report, err := audit.VerifyFiles(opts, files...)
			if err != nil {
				return usageError(err)
			}
			out := f.Streams().Out
			if output != outputTable {
				if err := printData(out, output, report); err != nil {
					return err
				}
			} else if err := audit.WriteReport(out, report, verifyStyle(palette{on: f.Color(out)})); err != nil {
				return err
			}
			if !report.OK {
				return &ExitError{Code: ExitFailed, Silent: true, Err: fmt.Errorf("the trail does not verify: %d problems", len(report.Problems)+report.ProblemsOmitted)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&keyFiles, "public-key", nil, "Public key file (PEM, or 32 bytes raw, hex or base64); repeat across a key rotation (required).")
	fl.StringVar(&trustedFile, "trusted-checkpoint", "", "A checkpoint line kept outside the trail; the trail must still reach it (a shorter trail is truncated); with --allow-partial, a trail that starts after it only gets a note that it was not checked.")
	fl.BoolVar(&allowPartial, "allow-partial", false, "Accept a trail whose oldest files were removed on purpose (it starts after seq 0).")
	outputFlag(cmd, &output, outputTable, outputJSON, outputYAML)
	return cmd
}

// verifyStyle paints the report's verdict words as the rest of the plugin does.
func verifyStyle(p palette) audit.ReportStyle {
	return func(failed bool, text string) string {
		if failed {
			return p.paint(red, text)
		}
		return p.paint(green, text)
	}
}
