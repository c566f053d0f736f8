// Package access decides who may read the control-plane status streams, with the shared
// libs/access: in token mode a bearer token authenticated with a TokenReview and authorized with
// a LocalSubjectAccessReview in the gateway's namespace for the virtual resource
// controlplane/status of agents.proompteng.ai (verb watch for streams, get for the one-shot
// status), so RBAC Roles grant it like any other read; in mtls mode a client certificate.
package access

import (
	"crypto/tls"
	"strings"

	"k8s.io/client-go/kubernetes"

	lib "github.com/agentplane/agentplane/libs/access"
)

// The shared types, under the names the gateway uses.
type (
	Error           = lib.Error
	Mode            = lib.Mode
	Reviewer        = lib.Reviewer
	ReviewerOptions = lib.ReviewerOptions
	TLSFiles        = lib.TLSFiles
	FrontProxy      = lib.FrontProxy
)

const (
	None  = lib.None
	Token = lib.Token
	MTLS  = lib.MTLS

	Unauthenticated = lib.Unauthenticated
	Forbidden       = lib.Forbidden
	Unavailable     = lib.Unavailable
)

// The virtual resource a token's user must be allowed to read, in the gateway's namespace.
const (
	Group       = "agents.proompteng.ai"
	Resource    = "controlplane"
	Subresource = "status"
	// VerbWatch is checked for streams, VerbGet for the one-shot status.
	VerbWatch = "watch"
	VerbGet   = "get"
)

// GatewayAudience is the audience a bearer token must be issued for to be accepted by the gateway
// (JANGAR_WATCH_AUTH_AUDIENCES by default): `kubectl create token NAME --audience
// agentplane-gateway`. A token of the API server's own audience, which every kubeconfig holds and
// every pod has mounted, is refused, so nobody's API-server credential is worth sending here.
const GatewayAudience = "agentplane-gateway"

// EnvPrefix prefixes the gateway's variables: JANGAR_WATCH_AUTH_MODE, JANGAR_WATCH_TLS_*.
const EnvPrefix = "JANGAR_WATCH"

var (
	KindOf      = lib.KindOf
	BearerToken = lib.BearerToken
	TokenExpiry = lib.TokenExpiry
	// NewFrontProxy reads the API server's front-proxy trust, for the aggregated API.
	NewFrontProxy = lib.NewFrontProxy
)

// ParseMode reads JANGAR_WATCH_AUTH_MODE.
func ParseMode(s string) (Mode, error) { return lib.ParseMode(EnvPrefix+"_AUTH_MODE", s) }

// ListenCheck refuses a non-loopback address when streams are not protected.
func ListenCheck(mode Mode, envName, addr string) error {
	return lib.ListenCheck(mode, EnvPrefix+"_AUTH_MODE", envName, addr)
}

// ServerConfig is the gateway's TLS (see libs/access.ServerConfig).
func ServerConfig(mode Mode, f TLSFiles) (*tls.Config, error) {
	f.Prefix = EnvPrefix
	return lib.ServerConfig(mode, f)
}

// NewReviewer checks tokens for reading namespace's control-plane status.
func NewReviewer(kc kubernetes.Interface, namespace string, o ReviewerOptions) *Reviewer {
	o.Authorize = lib.SubjectAccess(kc, namespace, lib.ResourceAttributes{Group: Group, Resource: Resource, Subresource: Subresource}, o.OnReview)
	if o.MissingToken == "" {
		o.MissingToken = "a bearer token is required: send Authorization: Bearer <token>, a token issued for this gateway's audience " +
			"(kubectl create token NAME --audience " + strings.Join(audiencesOr(o.Audiences), ",") + "; agentctl: --gateway-token or --gateway-token-file)"
	}
	return lib.NewReviewer(kc, o)
}

// NewResourceReviewer decides, for the console, whether a user may do a verb on a real resource
// of namespace (get or patch agentruns, say): a LocalSubjectAccessReview per user and verb,
// cached like the status Reviewer's. Tokens it is given are reviewed with o.Audiences.
func NewResourceReviewer(kc kubernetes.Interface, namespace, group, resource string, o ReviewerOptions) *Reviewer {
	return NewSubresourceReviewer(kc, namespace, group, resource, "", o)
}

// NewSubresourceReviewer is NewResourceReviewer for a subresource (get pods/log, say).
func NewSubresourceReviewer(kc kubernetes.Interface, namespace, group, resource, subresource string, o ReviewerOptions) *Reviewer {
	o.Authorize = lib.SubjectAccess(kc, namespace, lib.ResourceAttributes{Group: group, Resource: resource, Subresource: subresource}, o.OnReview)
	if o.MissingToken == "" {
		o.MissingToken = "sign in to the console, or send Authorization: Bearer <token>"
	}
	return lib.NewReviewer(kc, o)
}

func audiencesOr(a []string) []string {
	if len(a) == 0 {
		return []string{GatewayAudience}
	}
	return a[:1]
}
