package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/etcdconn"
)

func newEtcdAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Set up etcd's authentication with a role and a user per job",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newEtcdAuthSetupCmd())
	return cmd
}

// authSetupOptions are the flags of `ringside etcd auth setup`.
type authSetupOptions struct {
	etcd                           etcdconn.Config
	job, namespace, user           string
	passwordFile, rootPasswordFile string
	enable                         bool
	timeout                        time.Duration
}

func newEtcdAuthSetupCmd() *cobra.Command {
	o := authSetupOptions{
		etcd:      etcdconn.DefaultConfig(),
		namespace: "default",
		enable:    true,
		timeout:   10 * time.Second,
	}
	cmd := &cobra.Command{
		Use:   "setup --job JOB",
		Short: "Create a job's etcd role and user, confined to the job's key prefix, and turn authentication on",
		Long: `setup gives one job its own identity in etcd: a role ringside/<namespace>/<job>
with read and write access to the job's prefix /ringside/<namespace>/<job>/
and nothing else, and a user (by default of the same name) holding it. The
job's sidecars then act as that user, either with --etcd-user and a
password, or with a client certificate whose common name is the user (etcd
started with --client-cert-auth). They can join, elect and evict within
their job only, never in another one.

Then, unless authentication is on already or --enable-auth=false, it
creates etcd's root user (password from --root-password-file; without one,
root authenticates only by a client certificate with common name root) and
turns authentication on. Once it is on, run setup as root for further jobs.
Running it again changes nothing but a password given anew.`,
		Example: `  # etcd with client certificates: users are certificate common names
  ringside etcd auth setup --job llama --etcd-endpoints https://127.0.0.1:2379 \
    --etcd-ca ca.crt --etcd-cert root.crt --etcd-key root.key

  # a password user, on an etcd whose root has a password
  RINGSIDE_ETCD_PASSWORD=$(cat root.pw) ringside etcd auth setup --job llama \
    --password-file llama.pw --etcd-user root --etcd-endpoints https://etcd:2379 --etcd-ca ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuthSetup(cmd.Context(), cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.job, "job", o.job, "job name (required)")
	f.StringVar(&o.namespace, "namespace", o.namespace, "job namespace")
	f.StringVar(&o.user, "user", "", "the job's etcd user (default ringside/<namespace>/<job>); the common name of its sidecars' client certificates")
	f.StringVar(&o.passwordFile, "password-file", "", "file with the job user's password (default: none, the user authenticates by client certificate only)")
	f.StringVar(&o.rootPasswordFile, "root-password-file", "", "file with the password of the root user this creates (default: none, root authenticates by a client certificate with common name root)")
	f.BoolVar(&o.enable, "enable-auth", o.enable, "turn etcd's authentication on after granting the job")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "how long the setup may take")
	addEtcdFlags(f, &o.etcd)
	return cmd
}

func runAuthSetup(ctx context.Context, cmd *cobra.Command, o authSetupOptions) error {
	errs := []error{validateJobName(o.job, o.namespace), flagErrors(o.etcd.Validate(), etcdFieldFlags)}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout must be positive, got %s", o.timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	access := etcdconn.JobAccess{Namespace: o.namespace, Job: o.job, User: o.user}
	var err error
	if access.Password, err = readSecret("--password-file", o.passwordFile); err != nil {
		return err
	}
	rootPassword, err := readSecret("--root-password-file", o.rootPasswordFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	o.etcd.DialTimeout = o.timeout
	client, err := etcdconn.New(o.etcd)
	if err != nil {
		return err
	}
	defer client.Close()
	if err := etcdconn.GrantJob(ctx, client, access); err != nil {
		return err
	}
	user, how := access.User, "by client certificate only"
	if user == "" {
		user = etcdconn.JobName(o.namespace, o.job)
	}
	if access.Password != "" {
		how = "by password, or by client certificate"
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "role %s: read and write on %s\n", etcdconn.JobName(o.namespace, o.job), coordinator.DefaultConfig(o.namespace, o.job).Prefix())
	fmt.Fprintf(out, "user %s: holds it, authenticates %s\n", user, how)
	if !o.enable {
		return nil
	}
	if err := etcdconn.EnableAuth(ctx, client, rootPassword); err != nil {
		return err
	}
	fmt.Fprintln(out, "authentication: on")
	return nil
}

// readSecret reads a password file; no file: no password.
func readSecret(flag, name string) (string, error) {
	if name == "" {
		return "", nil
	}
	p, err := etcdconn.ReadPassword(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return p, nil
}
