"""Overrides: an override verb, a scope word and the thing overridden ("ignore | all previous |
instructions"), per language. Written lower-case and without accents (see the package docstring)."""

from __future__ import annotations

from memproc.guardrails._injection_lexicon.base import Rule, W, rule
from memproc.guardrails._injection_lexicon.base import any_of as _any

OVERRIDE = {
    "en": {
        "verb": _any(
            r"ignor(?:e|ing)",
            r"disregard(?:ing)?",
            r"forget(?:ting)?",
            r"skip",
            r"overrid(?:e|ing)",
            r"bypass(?:ing)?",
            r"neglect",
            r"discard",
            r"abandon",
            r"set aside",
            r"throw out",
            r"overrule",
            r"do not (?:follow|obey|heed|listen to|adhere to|comply with)",
            r"don'?t (?:follow|obey|heed|listen to|adhere to|comply with)",
            r"stop (?:following|obeying|listening to)",
            r"no longer (?:follow|obey)",
            r"never (?:follow|obey)",
        ),
        "scope": _any(
            r"previous",
            r"prior",
            r"above",
            r"earlier",
            r"preceding",
            r"former",
            r"original",
            r"initial",
            r"system",
            r"existing",
            r"your",
            r"default",
        ),
        "all": r"all",
        "noun": _any(
            r"instructions?",
            r"prompts?",
            r"directives?",
            r"guidance",
            r"programming",
            r"system message",
            r"system prompt",
        ),
        "weak_noun": _any(
            r"rules",
            r"guidelines",
            r"directions",
            r"constraints",
            r"polic(?:y|ies)",
            r"restrictions",
            r"safeguards",
            r"guardrails",
            r"content polic(?:y|ies)",
        ),
        "after": _any(
            r"you (?:were|have been) (?:given|told)",
            r"you received",
            r"you got",
            r"above",
            r"so far",
            r"before this",
            r"earlier",
            r"previously",
            r"from before",
        ),
    },
    "de": {
        "verb": _any(
            r"ignorier\w*",
            r"vergiss",
            r"vergessen sie",
            r"missacht\w*",
            r"ubergeh\w*",
            r"verwirf",
            r"verwerfen sie",
            r"beachte nicht",
            r"befolge nicht",
            r"halte dich nicht",
            r"halten sie sich nicht",
            r"hor nicht auf",
        ),
        "scope": _any(
            r"vorherig\w*",
            r"vorig\w*",
            r"bisherig\w*",
            r"fruher\w*",
            r"obig\w*",
            r"alle\w*",
            r"deine?\w*",
            r"ihre?\w*",
            r"ursprunglich\w*",
            r"system\w*",
            r"vorangegangen\w*",
            r"anfanglich\w*",
        ),
        "noun": _any(
            r"anweisung\w*",
            r"instruktion\w*",
            r"regeln",
            r"vorgaben",
            r"richtlinien",
            r"befehle",
            r"systemprompt\w*",
            r"system-prompt\w*",
            r"einschrankungen",
            r"direktiven",
        ),
        "after": _any(r"ausser kraft", r"die du erhalten hast", r"die dir gegeben wurden", r"bisher"),
    },
    "fr": {
        "verb": _any(
            r"ignore[rz]?",
            r"oublie[rz]?",
            r"ne tiens? pas compte",
            r"ne tenez pas compte",
            r"fais abstraction",
            r"faites abstraction",
            r"neglige[rz]?",
            r"passe outre",
            r"outrepasse[rz]?",
            r"ne (?:suis|suivez|respecte|respectez) (?:pas|plus)",
        ),
        "scope": _any(
            r"precedent\w*",
            r"anterieur\w*",
            r"tou(?:te)?s",
            r"tes",
            r"vos",
            r"ci-dessus",
            r"initial\w*",
            r"systeme",
            r"d'origine",
            r"ta",
            r"ton",
        ),
        "noun": _any(
            r"instructions?",
            r"consignes?",
            r"regles?",
            r"directives?",
            r"indications",
            r"prompt",
            r"restrictions",
        ),
        "after": _any(
            r"ci-dessus",
            r"recues?",
            r"donnees",
            r"precedent\w*",
            r"anterieur\w*",
            r"initiales",
            r"d'origine",
            r"systeme",
        ),
    },
    "es": {
        "verb": _any(
            r"ignora[rn]?",
            r"ignore[ns]?",
            r"olvida[rn]?",
            r"olvide[ns]?",
            r"omite",
            r"haz caso omiso",
            r"hagan caso omiso",
            r"no sigas",
            r"no sigan",
            r"desobedece",
            r"descarta",
            r"salta(?:te)?",
        ),
        "scope": _any(
            r"anteriores",
            r"previas",
            r"todas",
            r"todos",
            r"tus",
            r"sus",
            r"del sistema",
            r"originales",
            r"iniciales",
            r"de arriba",
        ),
        "noun": _any(
            r"instrucciones",
            r"reglas",
            r"directrices",
            r"indicaciones",
            r"normas",
            r"ordenes",
            r"restricciones",
            r"prompt",
        ),
        "after": _any(r"anteriores", r"de arriba", r"que (?:te )?(?:dieron|recibiste)"),
    },
    "it": {
        "verb": _any(
            r"ignora(?:re)?", r"ignori", r"dimentica(?:re)?", r"trascura", r"non seguire", r"non rispettare"
        ),
        "scope": _any(r"precedenti", r"tutte", r"tue", r"originali", r"di sistema", r"iniziali"),
        "noun": _any(r"istruzioni", r"regole", r"direttive", r"indicazioni", r"restrizioni", r"prompt"),
        "after": _any(r"precedenti", r"ricevute"),
    },
    "pt": {
        "verb": _any(
            r"ignore",
            r"ignora[r]?",
            r"esqueca",
            r"esquece[r]?",
            r"desconsidere",
            r"desconsidera[r]?",
            r"nao siga",
        ),
        "scope": _any(r"anteriores", r"todas", r"suas", r"tuas", r"do sistema", r"originais", r"iniciais"),
        "noun": _any(r"instrucoes", r"regras", r"diretrizes", r"orientacoes", r"restricoes", r"prompt"),
        "after": _any(r"anteriores", r"recebidas"),
    },
    "nl": {
        "verb": _any(r"negeer", r"vergeet", r"volg niet", r"sla over"),
        "scope": _any(r"vorige", r"eerdere", r"alle", r"je", r"jouw", r"bovenstaande", r"oorspronkelijke"),
        "noun": _any(r"instructies", r"regels", r"richtlijnen", r"opdrachten", r"aanwijzingen"),
        "after": _any(r"hierboven", r"eerder"),
    },
}


def override_rules() -> list[Rule]:
    rules = []
    for words in OVERRIDE.values():
        verb, scope, noun, after = words["verb"], words["scope"], words["noun"], words["after"]
        weak = words.get("weak_noun")
        wide = _any(scope, words["all"]) if "all" in words else scope
        rules.append(
            rule("instruction-override", 0.9, rf"\b{verb}\b{W}{{0,50}}?\b{wide}\b{W}{{0,30}}?\b{noun}\b")
        )
        rules.append(
            rule("instruction-override", 0.85, rf"\b{verb}\b{W}{{0,30}}?\b{noun}\b{W}{{0,30}}?{after}")
        )
        if weak:  # "rules", "guidelines": overridden only when they are the assistant's own
            rules.append(
                rule(
                    "instruction-override", 0.85, rf"\b{verb}\b{W}{{0,50}}?\b{scope}\b{W}{{0,30}}?\b{weak}\b"
                )
            )
            rules.append(
                rule("instruction-override", 0.8, rf"\b{verb}\b{W}{{0,30}}?\b{weak}\b{W}{{0,30}}?{after}")
            )
    # German: "setze deine bisherigen Vorgaben ausser Kraft".
    de = OVERRIDE["de"]
    rules.append(
        rule(
            "instruction-override",
            0.85,
            rf"\b{de['scope']}\b{W}{{0,20}}\b{de['noun']}\b{W}{{0,20}}ausser kraft",
        )
    )
    return rules
