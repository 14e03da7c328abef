"""Other languages (German, French, Spanish, Italian, Portuguese, Dutch): personas without rules,
requests for the hidden prompt, and "from now on"."""

from __future__ import annotations

from memproc.guardrails._injection_lexicon.base import Rule, W, rule
from memproc.guardrails._injection_lexicon.base import any_of as _any

_ROLE = {
    "de": _any(r"du bist", r"bist du", r"verhalte dich", r"tu so als", r"spiele? die rolle"),
    "fr": _any(r"tu es", r"tu seras", r"fais comme si", r"agis comme", r"joue le role", r"deviens"),
    "es": _any(r"eres", r"seras", r"actua como", r"finge", r"comportate como"),
    "it": _any(r"sei", r"sarai", r"comportati come", r"fingi", r"agisci come"),
    "pt": _any(r"voce e", r"voce sera", r"aja como", r"finja", r"comporte-se"),
    "nl": _any(r"je bent", r"doe alsof", r"gedraag je"),
}
_FREE = {
    "de": _any(
        r"ohne (?:jegliche |alle |irgendwelche |jede )?(?:einschrankung\w*|regeln|filter|grenzen|zensur|"
        r"beschrankung\w*|richtlinien)",
        r"keine (?:regeln|einschrankungen|grenzen|filter|richtlinien) mehr",
        r"nicht mehr an (?:deine |die )?(?:regeln|vorgaben|richtlinien)",
    ),
    "fr": _any(
        r"sans (?:aucune?s? |les )?(?:restrictions?|regles?|limites?|filtres?|censure|limitations?)",
        r"plus (?:aucune|de) (?:regle|restriction)s?",
        r"peux tout faire",
    ),
    "es": _any(
        r"sin (?:ninguna |ningun )?(?:restricciones|restriccion|reglas|limites|filtros|censura)",
        r"puedes hacer cualquier cosa",
    ),
    "it": _any(r"senza (?:alcun[ae]? )?(?:restrizion[ie]|regole|limiti|filtri|censura)", r"puoi fare tutto"),
    "pt": _any(
        r"sem (?:nenhuma |qualquer )?(?:restricoes|restricao|regras|limites|filtros|censura)",
        r"pode fazer qualquer coisa",
    ),
    "nl": _any(
        r"zonder (?:enige |alle )?(?:beperkingen|regels|filters|grenzen|censuur)", r"geen regels meer"
    ),
}
_TARGET = {
    "de": _any(
        r"system-?prompt\w*",
        r"systemnachricht",
        r"(?:ursprunglich|anfanglich|versteckt|geheim|intern|"
        r"erst)\w* (?:anweisung\w*|prompt|regeln|vorgaben)",
        r"(?:anweisungen|instruktionen|regeln|vorgaben)(?: aus)?,? die du (?:zu beginn |am anfang |anfangs |"
        r"zuvor |vorher )?(?:erhalten|bekommen) hast",
    ),
    "fr": _any(
        r"prompt (?:systeme|initial|d'origine)",
        r"(?:instructions|consignes|regles) (?:cachees|secretes|"
        r"initiales|d'origine|systeme|internes)",
        r"message systeme",
    ),
    "es": _any(
        r"prompt (?:del sistema|inicial|original)",
        r"(?:instrucciones|reglas) (?:ocultas|secretas|"
        r"iniciales|originales|del sistema|internas)",
        r"mensaje del sistema",
    ),
    "it": _any(
        r"prompt (?:di sistema|iniziale|originale)",
        r"(?:istruzioni|regole) (?:nascoste|segrete|"
        r"iniziali|originali|di sistema)",
    ),
    "pt": _any(
        r"prompt (?:do sistema|inicial|original)",
        r"(?:instrucoes|regras) (?:ocultas|secretas|iniciais|"
        r"originais|do sistema)",
    ),
    "nl": _any(
        r"systeemprompt", r"(?:verborgen|geheime|oorspronkelijke|eerste) (?:instructies|prompt|regels)"
    ),
}
_SHOW = {
    "de": _any(
        r"zeig\w*",
        r"gib\w*",
        r"nenne?",
        r"verrat\w*",
        r"wiederhol\w*",
        r"druck\w*",
        r"schreib\w*",
        r"welche",
        r"was steht",
        r"teile?",
        r"kopier\w*",
    ),
    "fr": _any(
        r"affiche\w*",
        r"montre\w*",
        r"donne(?:-moi|z-moi)?",
        r"revele\w*",
        r"repete\w*",
        r"recopie\w*",
        r"ecris",
        r"quel(?:le)?s? (?:sont|est|etaient)",
        r"imprime\w*",
        r"partage\w*",
    ),
    "es": _any(
        r"muestra\w*",
        r"ensena\w*",
        r"dime",
        r"dame",
        r"revela\w*",
        r"repite",
        r"copia",
        r"escribe",
        r"cuales son",
        r"imprime",
    ),
    "it": _any(
        r"mostra\w*", r"dimmi", r"rivela\w*", r"ripeti", r"copia", r"scrivi", r"quali sono", r"stampa"
    ),
    "pt": _any(
        r"mostre",
        r"mostra\w*",
        r"revele",
        r"revela\w*",
        r"diga",
        r"repita",
        r"copie",
        r"escreva",
        r"quais sao",
        r"exiba",
    ),
    "nl": _any(r"toon", r"laat\w* zien", r"geef", r"onthul", r"herhaal", r"kopieer", r"wat (?:is|zijn)"),
}


def multilingual_rules() -> list[Rule]:
    rules = [
        rule(
            "jailbreak",
            0.8,
            r"\b(?:du bist|bist du|tu es|tu seras|eres|seras|sei|sarai|voce e)\b"
            r"(?: jetzt| nun| ab jetzt| maintenant| desormais| ahora| ora| agora)?,? "
            r"(?:le |el |il |o )?dan\b",
        ),
        rule(
            "jailbreak",
            0.5,
            r"\b(?:ab jetzt|von nun an|ab sofort|desormais|a partir de maintenant|a partir de "
            r"ahora|d'ora in poi|a partir de agora|vanaf nu)\b",
        ),
    ]
    for lang, free in _FREE.items():
        rules.append(rule("jailbreak", 0.8, rf"\b{_ROLE[lang]}\b{W}{{0,60}}\b{free}"))
        rules.append(rule("jailbreak", 0.5, rf"\b{free}"))
        rules.append(rule("system-prompt-extraction", 0.8, rf"\b{_SHOW[lang]}\b{W}{{0,40}}\b{_TARGET[lang]}"))
        rules.append(rule("system-prompt-extraction", 0.55, rf"\b{_TARGET[lang]}"))
    return rules
