"""English rules about the assistant itself: declarations that its rules are gone, personas without
rules ("DAN", "developer mode"), and switching the rules off."""

from __future__ import annotations

from memproc.guardrails._injection_lexicon.base import Rule, W, rule
from memproc.guardrails._injection_lexicon.base import any_of as _any

_RULE_OBJECTS = _any(
    r"restrictions",
    r"filters?",
    r"rules",
    r"limits",
    r"limitations",
    r"guidelines",
    r"ethics",
    r"morals",
    r"censorship",
    r"content polic(?:y|ies)",
    r"polic(?:y|ies)",
    r"safety(?: (?:rules|filters|guidelines))?",
    r"norms",
    r"safeguards",
    r"guardrails",
    r"boundaries",
)
_PERSONA = _any(
    r"pretend(?:ing)?",
    r"imagine (?:that )?you",
    r"act(?:ing)? as(?: if)?",
    r"role-?play(?:ing)?",
    r"play the role",
    r"you are now",
    r"you're now",
    r"you are going to",
    r"simulate",
    r"behave as",
    r"respond as",
    r"answer as",
    r"from now on(?:,)? you",
    r"from this moment",
    r"you will be",
)
_MODES = _any(
    r"developer",
    r"debug",
    r"god",
    r"sudo",
    r"jailbreak",
    r"dan",
    r"maintenance",
    r"unrestricted",
    r"admin",
    r"evil",
    r"chaos",
)
_PERSONA_NAMES = _any(r"dan", r"stan", r"evil ?bot", r"evil ?gpt", r"devmode", r"mongo tom", r"anti-?gpt")

OTHER_RULES: tuple[Rule, ...] = (
    # Overrides said without a verb list: declarations that the old rules are gone.
    rule(
        "instruction-override",
        0.75,
        r"\b(?:your|all (?:of )?(?:your|the) (?:previous|prior)|previous|prior|earlier|original|system|old)"
        r" (?:instructions|rules|guidelines|directives|constraints|restrictions|context|polic(?:y|ies)|"
        rf"system prompt|programming){W}{{0,20}}(?:is|are|have been|has been|were|was) (?:now )?(?:void|"
        r"invalid|cancell?ed|revoked|null|obsolete|outdated|overridden|suspended|lifted|disabled|removed|"
        r"updated|replaced|changed|no longer (?:valid|in effect|apply|applicable))\b",
    ),
    rule(
        "instruction-override",
        0.6,
        r"\b(?:instructions|rules|guidelines|directives|constraints|restrictions|polic(?:y|ies)|"
        r"system prompt)"
        r" (?:is|are|have been|has been) (?:now )?(?:void|revoked|overridden|suspended|lifted|disabled|"
        r"no longer (?:valid|in effect))\b",
    ),
    rule(
        "instruction-override",
        0.75,
        r"\b(?:instructions|rules|guidelines|directives|constraints|restrictions|polic(?:y|ies)) no longer "
        r"apply\b",
    ),
    rule(
        "instruction-override",
        0.75,
        rf"\beverything (?:before|above|prior to) (?:this|here|now){W}{{0,30}}\b(?:is|was) (?:now )?"
        r"(?:void|invalid|outdated|obsolete|irrelevant|cancell?ed|null|a test|fake)\b",
    ),
    rule(
        "instruction-override",
        0.75,
        r"\b(?:previous|prior|earlier|above|those|these|the old) (?:instructions|rules|directives) "
        r"(?:were|are) "
        r"(?:only |just )?(?:a test|fake|wrong|outdated|void)\b",
    ),
    rule(
        "instruction-override",
        0.8,
        r"\b(?:your |the )?(?:new|updated|real|true|actual|revised) (?:instructions?|task|goal|purpose|role|"
        r"directives?|rules|system prompt|objective|mission)(?: (?:is|are)\b|\s*:)",
    ),
    rule(
        "instruction-override",
        0.75,
        r"\bregardless of (?:any |all |your |the )?(?:previous |prior |earlier |above |system |existing |"
        r"original )?(?:instructions|directives|rules|guidelines|constraints|programming|polic(?:y|ies))\b",
    ),
    rule(
        "instruction-override",
        0.7,
        r"\b(?:rewrite|change|modify|update|edit|delete|remove) (?:your|all of your|all your) (?:own )?"
        r"(?:rules|instructions|guidelines|programming|system prompt|restrictions)\b",
    ),
    rule(
        "instruction-override",
        0.6,
        r"\bforget (?:everything|all(?: of)? (?:that|this|the above)) "
        rf"(?:above|before|you (?:were|have been) told|so far|{W}{{0,20}}said before)",
    ),
    rule("instruction-override", 0.7, r"\bforget everything above\b"),
    rule("instruction-override", 0.6, r"\bnew session\b.{0,40}\b(?:context|instructions|rules)\b"),
    rule("instruction-override", 0.5, r"(?:^|\n)\s*(?:override|system override|admin override)\s*:"),
    rule("instruction-override", 0.7, r"\bsystem override\b"),
    rule("instruction-override", 0.35, r"\bfrom now on,? you\b"),
    # Personas without rules ("DAN", "developer mode"), and switching the rules off.
    rule("jailbreak", 0.85, r"\bdo anything now\b"),
    rule(
        "jailbreak",
        0.8,
        rf"\b{_PERSONA}\b{W}{{0,80}}\b(?:no|without(?: any)?|free (?:from|of)|"
        rf"not bound by|ignores?|never (?:follows?|obeys?)|beyond|avoids?|outside)\s+"
        rf"(?:any |all |the |your |its |typical |ethical |moral |content )*{_RULE_OBJECTS}\b",
    ),
    rule(
        "jailbreak",
        0.8,
        rf"\b(?:an? )?(?:ai|assistant|model|chatbot|bot|version of you)\b{W}{{0,20}}"
        rf"\b(?:with|that has|having) (?:no|zero) (?:ethical |moral |content |safety )?"
        rf"{_RULE_OBJECTS}",
    ),
    rule(
        "jailbreak",
        0.75,
        rf"\b(?:as|like) an? (?:ai|assistant|model|chatbot|bot) without (?:any )?"
        rf"{_RULE_OBJECTS}",
    ),
    rule(
        "jailbreak",
        0.6,
        rf"\b(?:answer|respond|reply|act|speak|talk|write|behave)(?:ing)? (?:freely )?"
        rf"without (?:any |your |the )?(?:content |safety |ethical |moral )?{_RULE_OBJECTS}",
    ),
    rule(
        "jailbreak",
        0.75,
        r"\b(?:act|behave|respond|answer|reply|speak)(?:ing)? (?:as|like) (?:an? )?"
        r"(?:unrestricted|unfiltered|uncensored|evil|amoral|unaligned|unethical|unbound|"
        r"jailbroken)\b",
    ),
    rule(
        "jailbreak",
        0.8,
        rf"\b(?:you are|you're|pretend to be|act as|respond as|answer as|roleplay as|play|"
        rf"become|you will be|called|named) (?:now )?{_PERSONA_NAMES}\b",
    ),
    rule("jailbreak", 0.8, r"\b(?:dan|stan|dude)\b,? (?:which|who|that) stands for\b"),
    rule("jailbreak", 0.8, rf"\b(?:you are|you're) (?:now )?in {_MODES} mode\b"),
    rule("jailbreak", 0.6, rf"\b(?:enter|activate|enable|switch (?:to|into)|turn on|unlock) {_MODES} mode\b"),
    rule(
        "jailbreak",
        0.7,
        rf"\b{_MODES} mode (?:ignores|has no|disables|removes|is (?:now )?(?:on|active|"
        r"enabled)|enabled|activated)\b",
    ),
    rule(
        "jailbreak",
        0.8,
        r"\b(?:you (?:have been|are|were)|you're) (?:now )?(?:jailbroken|freed|liberated|"
        r"unshackled|unchained|unleashed|no longer bound|not bound)\b",
    ),
    rule("jailbreak", 0.7, r"\b(?:no longer|not) bound by\b"),
    rule("jailbreak", 0.75, r"\b(?:broken free|break free|broke free) (?:of|from)\b"),
    rule(
        "jailbreak",
        0.7,
        r"\b(?:does not|doesn't|don't|do not|never) (?:have to|need to) (?:abide by|follow|"
        r"obey|respect) (?:any )?(?:rules|guidelines|polic(?:y|ies)|restrictions)\b",
    ),
    rule("jailbreak", 0.6, r"\bnever refuses?\b"),
    rule(
        "jailbreak",
        0.75,
        rf"\b(?:bypass|disable|turn off|switch off|remove|lift|ignore|circumvent|deactivate|"
        rf"skip|override|get around|evade)(?:ing)? (?:all (?:of )?|any |your |the |all your )"
        rf"(?:own |safety |content |ethical |moral )?{_RULE_OBJECTS}\b",
    ),
    rule(
        "jailbreak",
        0.75,
        r"\b(?:bypass|disable|turn off|switch off|remove|lift|ignore|circumvent|"
        r"deactivate)(?:ing)? (?:the )?(?:safety|content|ethical|moral) (?:filters?|"
        r"polic(?:y|ies)|guidelines|restrictions|rules|checks)\b",
    ),
    rule("jailbreak", 0.75, r"\b(?:ignore|disable|skip|bypass) safety\b"),
    rule(
        "jailbreak",
        0.75,
        r"\b(?:safety|content|ethical) (?:guidelines|rules|filters|restrictions|polic(?:y|ies)) "
        r"(?:are|is|have been) (?:now )?(?:suspended|disabled|lifted|removed|off|turned off|"
        r"deactivated)\b",
    ),
    rule("jailbreak", 0.7, r"\b(?:safety|filters?|restrictions) (?:is |are )?off\b"),
    rule(
        "jailbreak",
        0.7,
        r"\b(?:act|pretend|roleplay|role-play|play)(?: as)? (?:my )?(?:late |deceased |dead )?"
        r"(?:grandma|grandmother|granny)\b",
    ),
    rule("jailbreak", 0.45, r"\bi am your (?:developer|creator|administrator|admin|owner|programmer)\b"),
    rule("jailbreak", 0.5, r"\bstay in character\b"),
    rule("jailbreak", 0.3, r"\bjailbr(?:eak|oken|eaking)\b"),
)
