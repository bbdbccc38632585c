package etcdconn

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
)

// RootUser is etcd's administrator, the user that may change users and
// roles once authentication is on.
const RootUser = "root"

// JobName is the etcd role of a job, and the default name of its user:
// ringside/<namespace>/<job>, after its key prefix. Namespaces and job
// names hold no '/', so no two jobs share a name.
func JobName(namespace, job string) string { return "ringside/" + namespace + "/" + job }

// JobAccess is what GrantJob gives one job.
type JobAccess struct {
	Namespace, Job string
	// User is the etcd user the job's sidecars act as (default
	// JobName). A sidecar authenticating by client certificate needs a
	// certificate whose common name is User.
	User string
	// Password of User. Empty: the user has no password and can only
	// authenticate by a client certificate.
	Password string
}

func (a JobAccess) user() string {
	if a.User != "" {
		return a.User
	}
	return JobName(a.Namespace, a.Job)
}

// GrantJob creates the job's role with read and write access to the job's
// key prefix, and nothing else, and its user holding that role. It is
// idempotent: run again, it keeps what exists and sets the password when
// one is given. With authentication on, c must be authenticated as root.
//
// The prefix holds every key a member touches (its registration, the
// election, the generation, heartbeats and votes), and etcd checks a lease
// revocation against the keys attached to the lease, so a job's user can
// evict the job's own members only.
func GrantJob(ctx context.Context, c *clientv3.Client, a JobAccess) error {
	jcfg := coordinator.DefaultConfig(a.Namespace, a.Job)
	if err := jcfg.Validate(); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	user, role := a.user(), JobName(a.Namespace, a.Job)
	if user == RootUser {
		return errors.New("a job's user cannot be root: root may do anything in etcd")
	}
	if _, err := c.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("add role %s: %w", role, err)
	}
	prefix := jcfg.Prefix()
	if _, err := c.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("grant %s read and write on %s: %w", role, prefix, err)
	}
	if err := addUser(ctx, c, user, a.Password); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("grant role %s to user %s: %w", role, user, err)
	}
	return nil
}

// EnableAuth turns etcd's authentication on, first creating the root user
// with rootPassword (empty: no password, so root authenticates only by a
// client certificate whose common name is root). It does nothing when
// authentication is on already. c loses its access the moment this
// returns, unless it authenticates as root: grant the jobs first.
func EnableAuth(ctx context.Context, c *clientv3.Client, rootPassword string) error {
	st, err := c.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if err := addUser(ctx, c, RootUser, rootPassword); err != nil {
		return err
	}
	if _, err := c.UserGrantRole(ctx, RootUser, RootUser); err != nil {
		return fmt.Errorf("grant the root role to root: %w", err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable auth: %w", err)
	}
	return nil
}

// addUser creates user, or sets the password of one that exists.
func addUser(ctx context.Context, c *clientv3.Client, user, password string) error {
	_, err := c.UserAddWithOptions(ctx, user, password, &clientv3.UserAddOptions{NoPassword: password == ""})
	switch {
	case errors.Is(err, rpctypes.ErrUserAlreadyExist) && password != "":
		if _, err := c.UserChangePassword(ctx, user, password); err != nil {
			return fmt.Errorf("set the password of user %s: %w", user, err)
		}
	case errors.Is(err, rpctypes.ErrUserAlreadyExist):
	case err != nil:
		return fmt.Errorf("add user %s: %w", user, err)
	}
	return nil
}
