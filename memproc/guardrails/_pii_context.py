"""What the words before a number say it is: a phone number ("Tel.", "call me on", "Handy"), a payment
card ("card", "Visa", "carte bancaire"), or an identifier that merely looks like one ("order", "case",
"tracking", "Aktenzeichen", "version").

`context(text, start)` reads the same line up to `WINDOW` characters before a candidate and answers
"phone", "card", "id" or None, whichever cue is nearest the number. Words are matched case-insensitively and
without accents, in English, German, French, Spanish, Italian, Dutch and Portuguese.
"""

from __future__ import annotations

import re
import unicodedata

WINDOW = 40

_PHONE_CUES = (
    r"tel",
    r"tel\.",
    r"tele?phone?",
    r"telefon\w*",
    r"telefono",
    r"telefone",
    r"telemovel",
    r"ligue",
    r"ligar",
    r"contacto",
    r"phone",
    r"phones",
    r"call(?:ing)?",
    r"ring",
    r"cell",
    r"cellphone",
    r"mobile?",
    r"mob",
    r"handy",
    r"portable",
    r"movil",
    r"cellulare",
    r"cel",
    r"whatsapp",
    r"sms",
    r"text me",
    r"texting",
    r"fax",
    r"reach me",
    r"reach us",
    r"reach out",
    r"joindre",
    r"erreichen",
    r"erreichbar",
    r"llama\w*",
    r"chiama\w*",
    r"bel",
    r"bellen",
    r"rufnummer",
    r"ruf\w* an",
    r"ruckruf",
    r"rappel\w*",
    r"contact",
    r"kontakt",
    r"hotline",
    r"dial",
    r"my number",
    r"mon numero",
    r"meine nummer",
    r"mi numero",
    r"il mio numero",
    r"mijn nummer",
    r"numero de telephone",
    r"phone number",
    r"landline",
    r"alt\.?",
)
_ID_CUES = (
    r"order",
    r"orders",
    r"case",
    r"ticket",
    r"claim",
    r"ref",
    r"ref\.",
    r"reference",
    r"invoice",
    r"tracking",
    r"track",
    r"shipment",
    r"parcel",
    r"package",
    r"delivery",
    r"sendung\w*",
    r"paket\w*",
    r"bestell\w*",
    r"lieferschein",
    r"aktenzeichen",
    r"vorgang\w*",
    r"rechnung\w*",
    r"kunden\w*",
    r"auftrag\w*",
    r"dossier",
    r"commande",
    r"suivi",
    r"affaire",
    r"facture",
    r"reference",
    r"pedido",
    r"expediente",
    r"seguimiento",
    r"caso",
    r"factura",
    r"pratica",
    r"ordine",
    r"fattura",
    r"zaak\w*",
    r"bestelling",
    r"factuur",
    r"encomenda",
    r"fatura",
    r"processo",
    r"referencia",
    r"n\.o",
    r"isbn",
    r"version",
    r"versions?",
    r"build",
    r"serial",
    r"s/n",
    r"sn",
    r"id",
    r"no\.",
    r"nr\.",
    r"n°",
    r"n\.",
    r"#",
    r"account",
    r"acct",
    r"iban",
    r"bic",
    r"code",
    r"pin",
    r"po",
    r"sku",
    r"model",
    r"part",
    r"receipt",
    r"booking",
    r"confirmation",
    r"reservation",
    r"licen[cs]e",
    r"patent",
    r"policy",
    r"member\w*",
    r"customer",
    r"transaction",
    r"incident",
    r"request",
    r"batch",
    r"lot",
    r"imei",
    r"firmware",
    r"release",
    r"patch",
    r"versione",
    r"versie",
    r"version",
    r"softwarestand",
    r"stand",
    r"rev",
    r"revision",
    r"node",
    r"zip",
    r"postcode",
    r"plz",
    r"ext",
    r"ext\.",
    r"extension",
    r"room",
    r"gift card",
    r"voucher",
    r"coupon",
    r"seguimiento",
    r"envio",
    r"spedizione",
    r"tracking number",
    r"numero de suivi",
    r"numero de caso",
)
_CARD_CUES = (
    r"card",
    r"cards",
    r"card on file",
    r"visa",
    r"mastercard",
    r"amex",
    r"american express",
    r"carte",
    r"carte bancaire",
    r"cb",
    r"tarjeta",
    r"karte",
    r"kreditkarte",
    r"carta",
    r"creditcard",
    r"debit",
    r"credit",
    r"cvv",
    r"pan",
)
_CUE = re.compile(
    r"(?<![^\W_])(?:(?P<phone>"
    + "|".join(sorted(_PHONE_CUES, key=len, reverse=True))
    + r")|(?P<id>"
    + "|".join(sorted(_ID_CUES, key=len, reverse=True))
    + r")|(?P<card>"
    + "|".join(sorted(_CARD_CUES, key=len, reverse=True))
    + r"))(?![^\W_])"
)
# Words that join a cue to its number without changing what it is ("case number", "mon numéro est").
_FILLER = re.compile(
    r"^(?:[\s:.,#()\-–]|number|numbers|no|nr|n|nummer|numero|num|n°|is|ist|est|es|e|is:|me|at|on|an|au|al|unter|"
    r"sur|op|via|under|bitte|please|svp|the|my|your|la|le|el|il|de|der|die|das|du|of|for|per|a|to|us|new|neu|"
    r"changed|geandert)*$"
)


def _plain(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c))


def context(text: str, start: int) -> str | None:
    """ "phone", "card", "id" or None: the kind of the nearest cue before `start`, on the same line."""
    found = cue(text, start)
    return found[0] if found else None


def cue(text: str, start: int) -> tuple[str, int] | None:
    """The kind of the nearest cue before `start` that names the number there (as `context`), and
    about where the cue starts (accents and ligatures folded may shift it by a character or two)."""
    line_start = text.rfind("\n", 0, start) + 1
    offset = max(line_start, start - WINDOW)
    window = _plain(text[offset:start])
    nearest: tuple[int, int, str] | None = None
    for match in _CUE.finditer(window):
        kind = "phone" if match.group("phone") else "card" if match.group("card") else "id"
        if nearest is None or match.end() >= nearest[0]:
            nearest = (match.end(), match.start(), kind)
    if nearest is None:
        return None
    end, begin, kind = nearest
    between = window[end:]
    if kind == "phone" and len(between) > 25:
        return None  # a cue far back in a long sentence says little about this number
    if kind in ("id", "card") and not _FILLER.match(between):
        return None  # "order shipped, call me at ...": the id cue does not name this number
    return kind, offset + begin
