package cli

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/spectrocloud/nodewright/internal/profile/profilecli"
)

const profileHelp = `Sign and check EdgeProfile files offline, with keys and signatures cosign reads and writes
(docs/profile.md); the same commands as nodewright-profile.

FILE is a YAML or JSON EdgeProfile, or - for standard input; it is checked against the CRD's
rules before anything else. The password of a private key is read from
$NODEWRIGHT_PROFILE_PASSWORD, or else $COSIGN_PASSWORD (it may be empty); there is no prompt.

Exit codes: 0 done (verify: the signature is valid); 1 the profile is invalid, unsigned, or
its signature does not verify; 2 usage (bad arguments, unreadable files, not a key).`

func newProfileCommand(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Sign, verify, canonicalise and digest EdgeProfile files; make signing keys",
		Long:  profileHelp,
		Example: `  export NODEWRIGHT_PROFILE_PASSWORD=...
  kubectl nodewright profile keygen --output-key-prefix site-signing
  kubectl nodewright profile sign --key site-signing.key -w munich.yaml
  kubectl nodewright profile verify --key site-signing.pub munich.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	env := func() profilecli.Env {
		s := f.Streams()
		return profilecli.Env{Stdin: s.In, Stdout: s.Out, Stderr: s.ErrOut, LookupEnv: os.LookupEnv}
	}

	var prefix string
	keygen := &cobra.Command{
		Use:   "keygen",
		Short: "Write a new key pair, PREFIX.key (encrypted, as cosign writes it) and PREFIX.pub",
		Long: `Write a new ECDSA P-256 key pair to PREFIX.key (encrypted with the password from
$NODEWRIGHT_PROFILE_PASSWORD or $COSIGN_PASSWORD, as cosign generate-key-pair writes it) and
PREFIX.pub. It never overwrites a file.

Exit codes: 0 written, 2 usage (no password variable set, a file already exists).`,
		Example: `  NODEWRIGHT_PROFILE_PASSWORD=... kubectl nodewright profile keygen --output-key-prefix site-signing`,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			return profileResult(profilecli.Keygen(env(), prefix))
		},
	}
	keygen.Flags().StringVar(&prefix, "output-key-prefix", "cosign", "Write the keys to PREFIX.key and PREFIX.pub.")

	canonical := &cobra.Command{
		Use:   "canonical FILE",
		Short: "Print the canonical encoding of the profile's spec: the bytes its signature covers",
		Long: `Print the canonical encoding of the profile's spec, the bytes the signature covers, with no
newline after them: the file cosign sign-blob signs.

Exit codes: 0 printed, 1 the profile is invalid, 2 usage.`,
		Example: `  kubectl nodewright profile canonical munich.yaml > munich.json
  cosign sign-blob --key cosign.key --tlog-upload=false munich.json`,
		Args: exactArgs(1, "one FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return profileResult(profilecli.Canonical(env(), args[0]))
		},
	}

	digest := &cobra.Command{
		Use:   "digest FILE",
		Short: "Print sha256:<hex> of the profile's canonical encoding",
		Long: `Print the digest of the profile's spec, sha256: and the hex SHA-256 of its canonical
encoding, as NodewrightCluster status.profile.digest shows it.

Exit codes: 0 printed, 1 the profile is invalid, 2 usage.`,
		Example: `  kubectl nodewright profile digest munich.yaml`,
		Args:    exactArgs(1, "one FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return profileResult(profilecli.Digest(env(), args[0]))
		},
	}

	var signKey string
	var rewrite bool
	sign := &cobra.Command{
		Use:   "sign --key PRIVATE-KEY [-w] FILE",
		Short: "Sign the profile's spec; print the signed profile, or rewrite FILE with -w",
		Long: `Sign the profile's spec with the private key and print the profile with its signature field
filled in (comments and layout kept for a block-style YAML file), or with -w rewrite FILE.

Exit codes: 0 signed, 1 the profile is invalid or the password is wrong, 2 usage.`,
		Example: `  kubectl nodewright profile sign --key site-signing.key munich.yaml > munich.signed.yaml
  kubectl nodewright profile sign --key site-signing.key -w munich.yaml`,
		Args: exactArgs(1, "one FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return profileResult(profilecli.Sign(env(), args[0], signKey, rewrite))
		},
	}
	sign.Flags().StringVar(&signKey, "key", "", "The private key to sign with: cosign's encrypted key file, or an unencrypted PKCS#8 PEM key (required).")
	sign.Flags().BoolVarP(&rewrite, "write", "w", false, "Write the signed profile back to FILE instead of standard output.")

	var verifyKeys []string
	verify := &cobra.Command{
		Use:   "verify --key PUBLIC-KEY [--key PUBLIC-KEY]... FILE",
		Short: "Check the profile's signature against trusted public keys",
		Long: `Check the profile's signature against the trusted public keys and say which one verified it.

Exit codes: 0 the signature is valid; 1 the profile is invalid, unsigned, or its signature
does not verify with any of the keys; 2 usage.`,
		Example: `  kubectl nodewright profile verify --key site-signing.pub munich.yaml
  kubectl nodewright profile verify --key old.pub --key new.pub - < munich.yaml`,
		Args: exactArgs(1, "one FILE"),
		RunE: func(_ *cobra.Command, args []string) error {
			return profileResult(profilecli.Verify(env(), args[0], verifyKeys))
		},
	}
	verify.Flags().StringArrayVar(&verifyKeys, "key", nil, "A trusted public key file (PEM, as cosign.pub; may hold several keys); repeat for more (required).")

	cmd.AddCommand(keygen, canonical, digest, sign, verify)
	return cmd
}

// profileResult gives profilecli's outcome the plugin's exit codes (they agree: 2 for a
// UsageError, 1 otherwise), with the error described one field per line.
func profileResult(err error) error {
	if err == nil {
		return nil
	}
	described := errors.New(profilecli.Describe(err))
	if profilecli.ExitCode(err) == ExitUsage {
		return usageError(described)
	}
	return &failure{err: described}
}
