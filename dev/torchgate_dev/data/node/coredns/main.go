// Command coredns is CoreDNS with only the plugins the local cluster's DNS needs.
//
// Why a build of our own: the default CoreDNS binary compiles in every cloud provider's DNS
// backend (route53, azure, clouddns, ...), several minutes of a cold build on two cores for code
// the local cluster never runs. The local node answers cluster names only (Services, headless
// Services' pods) and has no upstream to forward to, so the chain is bind, ready, health, errors,
// log, cache and kubernetes, in CoreDNS's own plugin order.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives is the plugin chain in the order of CoreDNS's plugin.cfg.
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
