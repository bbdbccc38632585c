package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ringside/ringside/coordinator/record"
)

// Every flag of every command can be set from the environment, as
// RINGSIDE_<FLAG_NAME> (dashes become underscores), unless withEnv names
// other variables for it. The command line wins; the root command applies
// the environment before any command runs, and documentEnv adds each
// flag's variable to its help.

// envAnnotation is the flag annotation that withEnv sets.
const envAnnotation = "ringside-env"

// withEnv makes the flag name read the first of vars that is set, instead
// of RINGSIDE_<NAME>.
func withEnv(fs *pflag.FlagSet, name string, vars ...string) {
	if err := fs.SetAnnotation(name, envAnnotation, vars); err != nil {
		panic(err) // a flag name mistyped in this package
	}
}

// envVars are the variables flag f reads, in order.
func envVars(f *pflag.Flag) []string {
	if vars, ok := f.Annotations[envAnnotation]; ok {
		return vars
	}
	return []string{"RINGSIDE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))}
}

// flagsFromEnv sets every flag not given on the command line from its
// environment variable. The flags it sets do not count as Changed.
func flagsFromEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		for _, key := range envVars(f) {
			v, ok := os.LookupEnv(key)
			if !ok {
				continue
			}
			var err error
			if sv, isSlice := f.Value.(pflag.SliceValue); isSlice {
				err = sv.Replace(strings.Split(v, ","))
			} else {
				err = f.Value.Set(v)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (for --%s): %w", key, v, f.Name, err))
			}
			return
		}
	})
	return errors.Join(errs...)
}

// documentEnv appends its environment variable to the help of every flag
// of cmd and its subcommands that does not name it already.
func documentEnv(cmd *cobra.Command) {
	doc := func(f *pflag.Flag) {
		vars := envVars(f)
		if !strings.Contains(f.Usage, vars[0]) {
			f.Usage += " (env " + strings.Join(vars, ", then ") + ")"
		}
	}
	cmd.LocalNonPersistentFlags().VisitAll(doc)
	cmd.PersistentFlags().VisitAll(doc)
	for _, sub := range cmd.Commands() {
		documentEnv(sub)
	}
}

// fieldFlags names the flag that sets each config field (a
// record.FieldError's Field) in one command.
type fieldFlags map[string]string

// merge returns the union of f and others.
func (f fieldFlags) merge(others ...fieldFlags) fieldFlags {
	m := fieldFlags{}
	for _, src := range append([]fieldFlags{f}, others...) {
		for k, v := range src {
			m[k] = v
		}
	}
	return m
}

// flagErrors rewrites the *record.FieldErrors in err (one error or a tree
// of joins) to name the flag that set the field instead of the field.
func flagErrors(err error, flags fieldFlags) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range j.Unwrap() {
			errs = append(errs, flagErrors(e, flags))
		}
		return errors.Join(errs...)
	}
	var fe *record.FieldError
	if errors.As(err, &fe) {
		if flag, ok := flags[fe.Field]; ok {
			return fmt.Errorf("%s %s", flag, fe.Problem)
		}
	}
	return err
}

// The fields of the configs that several commands set.
var (
	etcdFieldFlags = fieldFlags{
		"Endpoints":    "--etcd-endpoints",
		"CertFile":     "--etcd-cert",
		"KeyFile":      "--etcd-key",
		"User":         "--etcd-user",
		"PasswordFile": "--etcd-password-file (or env " + passwordEnv + ")",
	}
	jobFieldFlags = fieldFlags{
		"Job":           "--job",
		"Namespace":     "--namespace",
		"TTL":           "--ttl",
		"Settle":        "--settle",
		"RestartSettle": "--restart-settle",
		"ExpectedSize":  "--expected-size",
		"StartWindow":   "--start-window",
		"MasterPort":    "--master-port/--master-port-range",
		"Policy.Min":    "--min",
		"Policy.Max":    "--max",
		"Policy.Unit":   "--unit",

		"Straggler.Action":   "--straggler-policy",
		"Straggler.Factor":   "--straggler-factor",
		"Straggler.Window":   "--straggler-window",
		"Straggler.MaxShare": "--straggler-max-share",
	}
)

// validateJobName checks --job and --namespace as the coordinator will.
func validateJobName(job, namespace string) error {
	if job == "" {
		return errors.New("--job is required (or env RINGSIDE_JOB): the name of the training job, as its sidecars are started with")
	}
	var errs []error
	if err := record.ValidateName("job", job); err != nil {
		errs = append(errs, fmt.Errorf("--job: %w", err))
	}
	if err := record.ValidateName("namespace", namespace); err != nil {
		errs = append(errs, fmt.Errorf("--namespace: %w", err))
	}
	return errors.Join(errs...)
}
