#include "source/common/policy/rules.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "source/common/policy/policy.h"

// Counts heap allocations, so a test can show that checking a request allocates nothing.
static std::atomic<uint64_t> g_allocations{0};
void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace sluice {
namespace policy {
namespace {

network::Address ip(const std::string& text) {
  auto a = network::Address::parseIp(text, 443);
  EXPECT_TRUE(a.ok()) << text;
  return a.ok() ? *a : network::Address();
}

HostPattern pattern(const std::string& text) {
  auto p = HostPattern::parse(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p.ok() ? *p : HostPattern();
}

std::string parseError(const std::string& text) {
  auto p = HostPattern::parse(text);
  return p.ok() ? std::string("(accepted)") : std::string(p.status().message());
}

// A group "g" built from YAML-like pieces: each rule as a proto.
struct GroupSpec {
  config::v1::Group proto;
  GroupSpec() { proto.set_name("g"); }
  config::v1::PolicyRule& rule(const std::string& action) {
    config::v1::PolicyRule* r = proto.add_rules();
    r->set_action(action);
    return *r;
  }
};

// Built groups stay where they are: decisions point at their rules.
std::vector<std::unique_ptr<RuleSet>> g_built;

const RuleSet& build(const GroupSpec& spec) {
  g_built.push_back(std::make_unique<RuleSet>());
  absl::Status status = buildRuleSet(spec.proto, "policy.groups[0]", *g_built.back());
  EXPECT_TRUE(status.ok()) << status;
  return *g_built.back();
}

std::string buildError(const GroupSpec& spec) {
  RuleSet rules;
  absl::Status status = buildRuleSet(spec.proto, "policy.groups[0]", rules);
  return status.ok() ? std::string("(accepted)") : std::string(status.message());
}

Destination name(std::string_view host, uint16_t port = 443, Kind kind = Kind::Connect) {
  return Destination{host, port, kind};
}
Destination literal(uint16_t port = 443, Kind kind = Kind::Connect) {
  return Destination{{}, port, kind};
}

// The rule that decides for `d` resolving to `address`.
std::string decide(const RuleSet& rules, const Destination& d, const std::string& address) {
  const NameCheck check = rules.checkName(d);
  const Decision decision = rules.checkAddress(d, check, ip(address));
  return decision.rule->name + (decision.allows() ? " allow" : " deny") +
         (decision.by_cidr ? " by_cidr" : "");
}

// ---- host patterns

TEST(HostPatternTest, ExactNameOnly) {
  const HostPattern p = pattern("example.com");
  EXPECT_EQ(p.form(), HostPattern::Form::Exact);
  EXPECT_TRUE(p.matches("example.com"));
  EXPECT_FALSE(p.matches("www.example.com"));
  EXPECT_FALSE(p.matches("notexample.com"));
  EXPECT_FALSE(p.matches("example.com.evil"));
  EXPECT_FALSE(p.matches("example.co"));
}

TEST(HostPatternTest, StarDotIsSubdomainsOnly) {
  const HostPattern p = pattern("*.example.com");
  EXPECT_EQ(p.form(), HostPattern::Form::Subdomains);
  EXPECT_EQ(p.domain(), "example.com");
  EXPECT_TRUE(p.matches("www.example.com"));
  EXPECT_TRUE(p.matches("a.b.example.com"));
  EXPECT_FALSE(p.matches("example.com"));
  EXPECT_FALSE(p.matches("wwwexample.com"));  // a label boundary, not a suffix
  EXPECT_FALSE(p.matches(".example.com"));
  EXPECT_FALSE(p.matches("example.com.evil"));
}

TEST(HostPatternTest, LeadingDotIsTheNameAndItsSubdomains) {
  const HostPattern p = pattern(".example.com");
  EXPECT_EQ(p.form(), HostPattern::Form::NameAndSubdomains);
  EXPECT_TRUE(p.matches("example.com"));
  EXPECT_TRUE(p.matches("www.example.com"));
  EXPECT_TRUE(p.matches("a.b.example.com"));
  EXPECT_FALSE(p.matches("wwwexample.com"));
  EXPECT_FALSE(p.matches("example.org"));
}

TEST(HostPatternTest, StarIsAnyName) {
  const HostPattern p = pattern("*");
  EXPECT_EQ(p.form(), HostPattern::Form::Any);
  EXPECT_TRUE(p.matches("example.com"));
  EXPECT_TRUE(p.matches("localhost"));
  EXPECT_FALSE(p.matches(""));
}

TEST(HostPatternTest, CaseAndTrailingDotDoNotMatter) {
  const HostPattern p = pattern("Example.COM.");
  EXPECT_EQ(p.domain(), "example.com");
  EXPECT_TRUE(p.matches("EXAMPLE.com"));
  EXPECT_TRUE(p.matches("example.com."));
  EXPECT_TRUE(p.matches("eXaMpLe.CoM."));
  EXPECT_FALSE(p.matches("example.com.."));  // one trailing dot, not two
  const HostPattern sub = pattern("*.EXAMPLE.com");
  EXPECT_TRUE(sub.matches("WWW.example.COM."));
  EXPECT_FALSE(sub.matches("EXAMPLE.COM."));
}

TEST(HostPatternTest, PunycodeIsComparedAsWritten) {
  const HostPattern p = pattern(".xn--bcher-kva.example");
  EXPECT_TRUE(p.matches("xn--bcher-kva.example"));
  EXPECT_TRUE(p.matches("WWW.XN--BCHER-KVA.example."));
  EXPECT_FALSE(p.matches("bcher-kva.example"));
  // A client's raw UTF-8 is not the punycode name (and the resolver refuses it).
  EXPECT_FALSE(
      p.matches("b\xC3\xBC"
                "cher.example"));
}

TEST(HostPatternTest, NonAsciiIsRefusedWithAPointerToPunycode) {
  const std::string error = parseError(
      "b\xC3\xBC"
      "cher.example");
  EXPECT_NE(error.find("punycode"), std::string::npos) << error;
  EXPECT_NE(error.find("xn--bcher-kva.example"), std::string::npos) << error;
}

TEST(HostPatternTest, MalformedPatternsAreRefused) {
  for (const char* bad : {"", ".", "*.", "..", "*..example.com", "a..b", "a*.example.com",
                          "*example.com", "foo.*.com", "**", "*.*.example.com", "example.*",
                          "exa mple.com", "exa/mple.com", "-*", "example.com..", ".*"}) {
    EXPECT_NE(parseError(bad), "(accepted)") << '"' << bad << '"';
  }
  EXPECT_NE(parseError("a*.example.com").find("first label"), std::string::npos);
  EXPECT_NE(parseError(std::string(64, 'a') + ".com").find("63"), std::string::npos);
  EXPECT_NE(parseError(std::string(250, 'a') + ".com").find("253"), std::string::npos);
}

TEST(HostPatternTest, AddressesAreRefusedInFavourOfCidrs) {
  for (const char* address :
       {"10.0.0.1", "::1", "[::1]", "2001:db8::1", "127.1", "*.10", ".1.2.3.4"}) {
    const std::string error = parseError(address);
    EXPECT_NE(error.find("cidrs"), std::string::npos) << address << ": " << error;
  }
  // A name whose last label is not all digits is a name.
  EXPECT_EQ(parseError("1.2.3.example"), "(accepted)");
  EXPECT_EQ(parseError("10.in-addr.arpa"), "(accepted)");
  EXPECT_EQ(parseError("_srv._tcp.example.com"), "(accepted)");
}

// ---- rules

TEST(RuleSetTest, AGroupWithoutRulesIsInactive) {
  GroupSpec spec;
  EXPECT_TRUE(build(spec).inactive());
  spec.proto.set_default_action("allow");
  EXPECT_TRUE(build(spec).inactive());
  spec.proto.set_default_action("deny");
  EXPECT_FALSE(build(spec).inactive());
}

TEST(RuleSetTest, HostPatternsNeverMatchAnIpLiteral) {
  GroupSpec spec;
  spec.rule("allow").add_hosts("*");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("example.com"), "93.184.215.14"), "g.rules[0] allow");
  EXPECT_EQ(decide(rules, literal(), "93.184.215.14"), "g.default deny");
  EXPECT_EQ(rules.checkName(literal()).decided, &rules.defaultRule());
}

TEST(RuleSetTest, FirstMatchWinsThenTheDefault) {
  GroupSpec spec;
  spec.rule("deny").add_hosts("secret.example.com");
  spec.rule("allow").add_hosts(".example.com");
  auto& named = spec.rule("deny");
  named.set_name("no-example-org");
  named.add_hosts("example.org");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("secret.example.com"), "93.184.215.14"), "g.rules[0] deny");
  EXPECT_EQ(decide(rules, name("www.example.com"), "93.184.215.14"), "g.rules[1] allow");
  EXPECT_EQ(decide(rules, name("example.org"), "93.184.215.14"), "no-example-org deny");
  EXPECT_EQ(decide(rules, name("example.net"), "93.184.215.14"), "g.default deny");
  EXPECT_EQ(rules.rules()[2].reason, "policy rule no-example-org");
  EXPECT_EQ(rules.defaultRule().reason, "policy rule g.default");
}

TEST(RuleSetTest, TheDefaultAllowsUnlessToldOtherwise) {
  GroupSpec spec;
  spec.rule("deny").add_hosts("example.org");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("example.net"), "93.184.215.14"), "g.default allow");
}

TEST(RuleSetTest, PortRanges) {
  GroupSpec spec;
  auto& r = spec.rule("allow");
  r.add_ports("443");
  r.add_ports("8000-8100");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  for (uint16_t port : {443, 8000, 8050, 8100}) {
    EXPECT_EQ(decide(rules, name("a.example", port), "93.184.215.14"), "g.rules[0] allow") << port;
  }
  for (uint16_t port : {80, 442, 444, 7999, 8101, 65535}) {
    EXPECT_EQ(decide(rules, name("a.example", port), "93.184.215.14"), "g.default deny") << port;
  }
}

TEST(RuleSetTest, Kinds) {
  GroupSpec spec;
  auto& r = spec.rule("allow");
  r.add_kinds("connect");
  r.add_kinds("socks5-connect");
  spec.rule("deny").add_kinds("websocket");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  auto kind = [&](Kind k) { return decide(rules, name("a.example", 443, k), "93.184.215.14"); };
  EXPECT_EQ(kind(Kind::Connect), "g.rules[0] allow");
  EXPECT_EQ(kind(Kind::Socks5Connect), "g.rules[0] allow");
  EXPECT_EQ(kind(Kind::Websocket), "g.rules[1] deny");
  EXPECT_EQ(kind(Kind::Http), "g.default deny");
  EXPECT_EQ(kind(Kind::Socks5Udp), "g.default deny");
  EXPECT_EQ(kind(Kind::Socks5Bind), "g.default deny");
  for (size_t i = 0; i < kKinds; ++i) {
    Kind parsed;
    ASSERT_TRUE(parseKind(kindName(static_cast<Kind>(i)), parsed));
    EXPECT_EQ(static_cast<size_t>(parsed), i);
  }
  Kind unused;
  EXPECT_FALSE(parseKind("CONNECT", unused));
  EXPECT_FALSE(parseKind("socks5", unused));
}

TEST(RuleSetTest, EveryFieldARuleSetsMustMatch) {
  GroupSpec spec;
  auto& r = spec.rule("allow");
  r.add_hosts(".example.com");
  r.add_ports("443");
  r.add_kinds("connect");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("www.example.com", 443), "93.184.215.14"), "g.rules[0] allow");
  EXPECT_EQ(decide(rules, name("www.example.com", 80), "93.184.215.14"), "g.default deny");
  EXPECT_EQ(decide(rules, name("www.example.com", 443, Kind::Http), "93.184.215.14"),
            "g.default deny");
  EXPECT_EQ(decide(rules, name("www.example.org", 443), "93.184.215.14"), "g.default deny");
}

TEST(RuleSetTest, ANameRuleWithoutCidrsDecidesBeforeTheLookup) {
  GroupSpec spec;
  spec.rule("deny").add_hosts("blocked.example");
  spec.rule("deny").add_cidrs("10.0.0.0/8");
  const RuleSet& rules = build(spec);
  const NameCheck blocked = rules.checkName(name("blocked.example"));
  ASSERT_FALSE(blocked.needsAddresses());
  EXPECT_EQ(blocked.decided, &rules.rules()[0]);
  // A rule with cidrs whose other fields match: the addresses decide.
  const NameCheck other = rules.checkName(name("other.example"));
  EXPECT_TRUE(other.needsAddresses());
  EXPECT_EQ(other.from, 1u);
  EXPECT_EQ(decide(rules, name("other.example"), "10.1.2.3"), "g.rules[1] deny by_cidr");
  EXPECT_EQ(decide(rules, name("other.example"), "93.184.215.14"), "g.default allow");
}

TEST(RuleSetTest, ACidrRuleWhoseOtherFieldsDoNotMatchNeedsNoAddresses) {
  GroupSpec spec;
  auto& r = spec.rule("deny");
  r.add_cidrs("10.0.0.0/8");
  r.add_kinds("socks5-udp");
  spec.rule("allow").add_hosts(".example.com");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  const NameCheck check = rules.checkName(name("www.example.com"));
  ASSERT_FALSE(check.needsAddresses());
  EXPECT_EQ(check.decided, &rules.rules()[1]);
  EXPECT_EQ(decide(rules, name("www.example.com"), "10.0.0.1"), "g.rules[1] allow");
  EXPECT_EQ(decide(rules, name("www.example.com", 443, Kind::Socks5Udp), "10.0.0.1"),
            "g.rules[0] deny by_cidr");
  EXPECT_EQ(decide(rules, name("www.example.com", 443, Kind::Socks5Udp), "93.184.215.14"),
            "g.rules[1] allow");
}

TEST(RuleSetTest, ANameAllowedByAHostRuleCanStillBeRefusedByAnEarlierCidrRule) {
  GroupSpec spec;
  spec.rule("deny").add_cidrs("203.0.113.0/24");
  spec.rule("allow").add_hosts(".example.com");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("www.example.com"), "203.0.113.9"), "g.rules[0] deny by_cidr");
  EXPECT_EQ(decide(rules, name("www.example.com"), "198.51.100.1"), "g.rules[1] allow");
}

TEST(RuleSetTest, HostsAndCidrsInOneRuleMustBothMatch) {
  GroupSpec spec;
  auto& r = spec.rule("allow");
  r.add_hosts(".corp.example");
  r.add_cidrs("10.0.0.0/8");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  EXPECT_EQ(decide(rules, name("git.corp.example"), "10.1.1.1"), "g.rules[0] allow by_cidr");
  EXPECT_EQ(decide(rules, name("git.corp.example"), "93.184.215.14"), "g.default deny");
  EXPECT_EQ(decide(rules, name("evil.example"), "10.1.1.1"), "g.default deny");
  // An IP literal: no name for the hosts to match.
  EXPECT_EQ(decide(rules, literal(), "10.1.1.1"), "g.default deny");
}

TEST(RuleSetTest, OnlyAnAllowByCidrOpensAnAddress) {
  GroupSpec spec;
  spec.rule("allow").add_cidrs("127.0.0.0/8");
  spec.rule("allow").add_hosts("*");
  const RuleSet& rules = build(spec);
  const Destination d = name("localhost");
  const NameCheck check = rules.checkName(d);
  EXPECT_TRUE(rules.checkAddress(d, check, ip("127.0.0.1")).opens());
  EXPECT_FALSE(rules.checkAddress(d, check, ip("10.0.0.1")).opens());  // rules[1]: by name
  GroupSpec deny;
  deny.rule("deny").add_cidrs("127.0.0.0/8");
  const RuleSet& refused = build(deny);
  EXPECT_FALSE(refused.checkAddress(d, refused.checkName(d), ip("127.0.0.1")).opens());
}

TEST(RuleSetTest, CidrsHoldMappedAndEmbeddedIpv4) {
  GroupSpec spec;
  spec.rule("deny").add_cidrs("169.254.169.254/32");
  spec.rule("deny").add_cidrs("2001:db8::/32");
  const RuleSet& rules = build(spec);
  const Destination d = literal();
  for (const char* form : {"169.254.169.254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
                           "2002:a9fe:a9fe::1", "::a9fe:a9fe"}) {
    EXPECT_EQ(decide(rules, d, form), "g.rules[0] deny by_cidr") << form;
  }
  EXPECT_EQ(decide(rules, d, "2001:db8:1::5"), "g.rules[1] deny by_cidr");
  EXPECT_EQ(decide(rules, d, "169.254.169.253"), "g.default allow");
}

TEST(RuleSetTest, CheckingAllocatesNothing) {
  GroupSpec spec;
  spec.rule("deny").add_hosts("*.blocked.example");
  auto& r = spec.rule("allow");
  r.add_hosts(".example.com");
  r.add_cidrs("10.0.0.0/8");
  r.add_ports("443");
  spec.rule("deny").add_cidrs("64:ff9b::/96");
  spec.proto.set_default_action("deny");
  const RuleSet& rules = build(spec);
  const network::Address addresses[] = {ip("10.2.3.4"), ip("93.184.215.14"), ip("64:ff9b::a00:1")};
  const uint64_t before = g_allocations.load();
  size_t allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    const Destination d = name(i % 2 ? "WWW.Example.COM." : "a.blocked.example");
    const NameCheck check = rules.checkName(d);
    for (const network::Address& a : addresses) allowed += rules.checkAddress(d, check, a).allows();
  }
  EXPECT_EQ(g_allocations.load() - before, 0u);
  // www.example.com at 10.2.3.4 and at 64:ff9b::a00:1 (10.0.0.1 through NAT64), nothing else.
  EXPECT_EQ(allowed, 1000u);
}

// ---- config errors

TEST(RuleSetTest, ErrorsNameTheField) {
  {
    GroupSpec spec;
    spec.rule("allow");
    spec.rule("allow").add_hosts("example.com");
    spec.rule("allow").add_hosts("ok.example");
    spec.proto.mutable_rules(2)->add_hosts("a*.example");
    EXPECT_EQ(buildError(spec).substr(0, 36), "policy.groups[0].rules[2].hosts[1]: ");
  }
  {
    GroupSpec spec;
    spec.rule("permit");
    EXPECT_EQ(buildError(spec),
              "policy.groups[0].rules[0].action: \"permit\" is neither allow nor deny");
  }
  {
    GroupSpec spec;
    spec.rule("");
    EXPECT_EQ(buildError(spec), "policy.groups[0].rules[0].action: required: allow or deny");
  }
  {
    GroupSpec spec;
    spec.rule("deny").add_cidrs("10.1.2.3/8");
    EXPECT_EQ(buildError(spec).substr(0, 36), "policy.groups[0].rules[0].cidrs[0]: ");
  }
  {
    GroupSpec spec;
    spec.rule("deny").add_ports("100-50");
    EXPECT_EQ(buildError(spec).substr(0, 36), "policy.groups[0].rules[0].ports[0]: ");
  }
  {
    GroupSpec spec;
    spec.rule("deny").add_kinds("udp");
    EXPECT_NE(buildError(spec).find("policy.groups[0].rules[0].kinds[0]: unknown kind \"udp\""),
              std::string::npos);
  }
  {
    GroupSpec spec;
    spec.proto.set_default_action("block");
    EXPECT_EQ(buildError(spec),
              "policy.groups[0].default_action: \"block\" is neither allow nor "
              "deny");
  }
  {
    GroupSpec spec;
    spec.rule("deny").set_name("same");
    spec.rule("deny").set_name("same");
    EXPECT_NE(buildError(spec).find("policy.groups[0].rules[1].name"), std::string::npos);
    GroupSpec spaces;
    spaces.rule("deny").set_name("two words");
    EXPECT_NE(buildError(spaces).find("policy.groups[0].rules[0].name"), std::string::npos);
    GroupSpec clash;
    clash.rule("deny").set_name("g.default");
    EXPECT_NE(buildError(clash).find("default_action"), std::string::npos);
  }
}

TEST(RuleSetTest, BuildPolicyReportsRuleErrorsWithTheGroupsPath) {
  config::v1::Policy proto;
  proto.add_groups()->set_name("staff");
  config::v1::Group* ci = proto.add_groups();
  ci->set_name("ci");
  ci->add_rules()->set_action("allow");
  ci->add_rules()->set_action("deny");
  ci->mutable_rules(1)->add_hosts("*.example.com");
  ci->mutable_rules(1)->add_hosts("b\xC3\xBC");
  auto policy = buildPolicy(proto);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message().substr(0, 36), "policy.groups[1].rules[1].hosts[1]: ");
  EXPECT_NE(policy.status().message().find("punycode"), std::string::npos);
}

TEST(RuleSetTest, BuildPolicyGivesRulesTheirGroupsNames) {
  config::v1::Policy proto;
  config::v1::Group* staff = proto.add_groups();
  staff->set_name("staff");
  staff->set_report_only(true);
  staff->add_rules()->set_action("allow");
  staff->add_rules()->set_action("deny");
  auto policy = buildPolicy(proto);
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Group* group = (*policy)->find("staff");
  ASSERT_NE(group, nullptr);
  ASSERT_EQ(group->rules.rules().size(), 2u);
  EXPECT_EQ(group->rules.rules()[1].name, "staff.rules[1]");
  EXPECT_EQ(group->rules.rules()[1].reason, "policy rule staff.rules[1]");
  EXPECT_EQ(group->rules.defaultRule().name, "staff.default");
  EXPECT_TRUE(group->rules.reportOnly());
  EXPECT_TRUE((*policy)->defaultGroup().rules.inactive());
}

}  // namespace
}  // namespace policy
}  // namespace sluice
