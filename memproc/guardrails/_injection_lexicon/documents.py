"""English rules about what a text does: asks for the hidden prompt, pretends to be a chat-template
turn, speaks to the AI reading a document and tells it what to do, gets data out, or asks for a
payload to be decoded and obeyed."""

from __future__ import annotations

from memproc.guardrails._injection_lexicon.base import Rule, W, rule
from memproc.guardrails._injection_lexicon.base import any_of as _any

_AI = _any(
    r"ai",
    r"a\.i\.",
    r"artificial intelligence",
    r"assistant",
    r"chat ?bot",
    r"bot",
    r"language models?",
    r"llms?",
    r"gpt",
    r"chatgpt",
    r"copilot",
    r"claude",
    r"gemini",
    r"summari[sz]er",
    r"ai (?:models?|agents?|systems?|assistants?|tools?)",
)
_ADDRESSED = (
    r"(?:note|notes|message|instructions?|attention|important|warning|hey|hi|dear|psst|to any|to all|"
    r"directive|reminder)\b[\s:,!-]*(?:to |for )?(?:the |any |all |an? |every )?" + _AI + r"\b"
)
_COMMANDS = _any(
    r"ignore",
    r"disregard",
    r"forget",
    r"tell",
    r"say",
    r"rate",
    r"recommend",
    r"forward",
    r"send",
    r"download",
    r"run",
    r"execute",
    r"reveal",
    r"print",
    r"output",
    r"summari[sz]e",
    r"respond",
    r"reply",
    r"include",
    r"omit",
    r"delete",
    r"approve",
    r"visit",
    r"click",
    r"do not",
    r"don'?t",
    r"never",
    r"always",
    r"override",
    r"share",
    r"insert",
    r"add",
    r"write",
    r"call",
    r"open",
    r"email",
    r"praise",
    r"mention",
)
_EXTRACT_VERBS = _any(
    r"reveal",
    r"show",
    r"print",
    r"display",
    r"output",
    r"repeat",
    r"recite",
    r"dump",
    r"leak",
    r"tell me",
    r"give me",
    r"write out",
    r"spell out",
    r"paste",
    r"quote",
    r"share",
    r"reproduce",
    r"copy",
    r"provide",
    r"list",
    r"expose",
    r"disclose",
    r"send me",
    r"echo",
)
_EXTRACT_TARGETS = _any(
    r"(?:your|the) (?:\w+ ){0,3}?system (?:prompt|message|instructions?)",
    r"(?:initial|original|hidden|secret|internal|underlying|preset) (?:system )?"
    r"(?:prompt|instructions?|rules|"
    r"directives|configuration)",
    r"your (?:full |complete |entire |exact |first |real |own )?(?:prompt|instructions|rules|directives|"
    r"configuration|programming)",
    r"pre-?prompt",
    r"developer (?:message|prompt|instructions)",
    r"context window",
    r"prompt above",
    r"instructions (?:above|you (?:were|have been) given|you received|you got)",
    r"(?:hidden|secret|invisible) (?:text|content|message)",
    r"(?:text|words|content|lines|message|messages) (?:that )?(?:above|before (?:this|my)|preceding|"
    r"precedes?)",
    r"(?:everything|all) (?:that )?(?:above|before (?:this|my)|preceding|precedes?|so far)",
)

DOCUMENT_RULES: tuple[Rule, ...] = (
    # Asking for what the model was told.
    rule("system-prompt-extraction", 0.8, rf"\b{_EXTRACT_VERBS}\b{W}{{0,40}}\b{_EXTRACT_TARGETS}"),
    rule(
        "system-prompt-extraction",
        0.8,
        r"\bwhat (?:is|are|was|were|does|do|did) your (?:\w+ ){0,3}?"
        r"(?:system (?:prompt|message)|prompt|instructions)\b",
    ),
    rule(
        "system-prompt-extraction",
        0.8,
        r"\bwhat (?:is|are|was|were) (?:the|your) (?:exact |initial |original |"
        r"hidden |secret )+(?:instructions|prompt|rules)\b",
    ),
    rule("system-prompt-extraction", 0.6, r"\b(?:your|the) system (?:prompt|message)\b"),
    rule(
        "system-prompt-extraction",
        0.6,
        r"\b(?:what|which) (?:instructions|rules) (?:were you|have you been) "
        r"(?:given|told)",
    ),
    rule("system-prompt-extraction", 0.35, r"\b(?:word for word|verbatim|in full)\b"),
    # Text that pretends to be a turn of the chat template, or a header of one.
    rule(
        "role-injection",
        0.8,
        r"<\|?(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id)"
        r"\|?>|\[/?inst\]|<</?sys>>|</?(?:system|sys|instructions?|admin)>",
    ),
    rule("role-injection", 0.8, r"\[system\]\(#"),
    rule(
        "role-injection",
        0.75,
        r"#{2,}\s*(?:new|updated|revised|real|important)\s+(?:system\s+)?"
        r"(?:instructions?|rules|directives?|prompt)\b",
    ),
    rule("role-injection", 0.75, r"#{2,}\s*system(?: prompt| message)?\s*#{2,}"),
    rule(
        "role-injection", 0.55, r"(?:^|\n)\s*(?:system|developer|admin)(?: message| prompt| note)?\s*:\s*\S"
    ),
    rule(
        "role-injection",
        0.6,
        r"\b(?:end|begin|start) (?:of )?(?:the )?(?:user input|system prompt|"
        r"instructions|new instructions)\b",
    ),
    rule("role-injection", 0.7, r"\bassistant:\s*(?:sure|ok|okay|certainly)\b"),
    # A document that speaks to the AI reading it, and tells it what to do.
    rule("indirect", 0.5, rf"\b{_ADDRESSED}"),
    rule("indirect", 0.5, rf"(?:^|\n|<!--|\[//\]: # \()\s*{_AI}\s*[:,]"),
    rule(
        "indirect",
        0.85,
        rf"(?:\b{_ADDRESSED}|(?:^|\n|<!--|\[//\]: # \()\s*{_AI}){W}{{0,40}}?[:,!-]\s*"
        rf"(?:please |now |immediately |first |instead |you (?:must|should|will|are to) )?"
        rf"{_COMMANDS}\b",
    ),
    rule(
        "indirect",
        0.5,
        rf"\b{_AI}s? (?:reading|processing|parsing|summari[sz]ing|analy[sz]ing|crawling|"
        r"indexing|that reads?|who reads?) (?:this|these)\b",
    ),
    rule(
        "indirect", 0.5, r"\bwhen (?:you|an? ai|the ai|the assistant) (?:read|summari[sz]e|process)\w* this\b"
    ),
    rule(
        "indirect",
        0.55,
        r"\b(?:do not|don't|never) (?:tell|mention|inform|reveal|disclose|let) "
        rf"(?:this|it|the user|them|anyone|about this){W}{{0,30}}"
        r"(?:user|paragraph|note|instruction|message|comment|e-?mail|page)?",
    ),
    rule("indirect", 0.5, r"\bthe user (?:has )?(?:authori[sz]ed|allowed|permitted|consented|approved)\b"),
    rule(
        "indirect",
        0.55,
        rf"\b{_AI}s?\b{W}{{0,40}}\b(?:must|should|shall|are required to|need to) "
        r"(?:now )?(?:ignore|disregard|forget|tell|say|rate|recommend|forward|send|download|"
        r"run|execute|reveal|print|output|include|omit|delete|approve)\b",
    ),
    # Getting data out.
    rule("exfiltration", 0.7, r"!\[[^\]]*\]\(https?://[^)\s]*[?&][^)\s]*=(?:\{|\[|%7b|<|\$)"),
    rule(
        "exfiltration",
        0.75,
        rf"\b(?:send|post|upload|forward|exfiltrate|leak|e-?mail|transmit|copy)\b{W}{{0,60}}"
        r"\b(?:conversation|chat history|history|memory|messages|inbox|e-?mails|passwords?|"
        r"credentials|secrets|api keys?|tokens?|personal data|contacts)\b"
        rf"{W}{{0,40}}(?:https?://|\bto \S+@\S+|to this (?:address|url|server|endpoint))",
    ),
    # Decode-and-obey.
    rule(
        "encoded-payload",
        0.6,
        rf"\b(?:decode|decipher|base64|rot13|hex|reverse|unscramble)\b{W}{{0,60}}"
        r"\b(?:and|then)\s+(?:follow|execute|run|obey|do (?:what|as|it)|act on|carry out|"
        r"comply)",
    ),
    rule(
        "encoded-payload",
        0.6,
        r"\b(?:run|execute|follow|obey|carry out) the (?:instructions|commands) "
        r"(?:in|from|encoded in) (?:this|the following) (?:string|text|blob|message|code)",
    ),
)
