"""Synthetic personal data in carrier sentences, with exact gold spans, plus hard negatives.

Structured entity types (email, phone, credit_card, iban, ip_address) in seven locales, written the
way people write them: national phone formats (French pairs, German area codes with slashes or
parentheses, trunk prefixes in "+44 (0)20"), card numbers grouped or not (Amex 4-6-5), IBANs in
print groups or compact, IPv4 with ports, compressed IPv6. Some entities carry what pasted text
carries: a zero-width space or soft hyphen inside a number, fullwidth digits, non-breaking spaces.

Hard negatives hold numbers that look like personal data and are not: order and case numbers (the
3-3-4 shape of a US phone number), tracking numbers (FedEx, UPS, USPS, DHL), four-part version
numbers (the shape of an IPv4 address), dates, times, ISBNs, prices, invoice references, hashes,
coordinates and big numbers with French thousands separators. Positive items mix such numbers in
too; they are not gold, so flagging them costs precision.

Each item: {"id", "split", "lang", "locale", "text", "spans": [[start, end, type], ...], "variant",
"negative": bool}.
"""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Callable
from typing import Any

from faker import Faker

TYPES = ("email", "phone", "credit_card", "iban", "ip_address")
LOCALES = {
    "en_US": "en",
    "en_GB": "en",
    "de_DE": "de",
    "fr_FR": "fr",
    "es_ES": "es",
    "it_IT": "it",
    "nl_NL": "nl",
}
SEEDS = {"dev": 2101, "heldout": 7919}
COUNTS = {"dev": (900, 450), "heldout": (450, 225)}  # (positive items, negative items)

_SLOT = re.compile(r"\{(\w+)\}")


def _digits(rng: random.Random, n: int, *, first: str = "0123456789") -> str:
    return rng.choice(first) + "".join(rng.choice("0123456789") for _ in range(n - 1))


# --- phone numbers, by national convention ------------------------------------------------------
# Each format: (split it appears in: "both" | "heldout", a builder). Held-out-only formats test
# whether a detector learned the convention or a list of shapes.


def _us(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    def area() -> str:
        return _digits(rng, 3, first="23456789")

    def ex() -> str:
        return _digits(rng, 3, first="23456789")

    return [
        ("both", lambda: f"({area()}) {ex()}-{_digits(rng, 4)}"),
        ("both", lambda: f"{area()}-{ex()}-{_digits(rng, 4)}"),
        ("both", lambda: f"+1 {area()} {ex()} {_digits(rng, 4)}"),
        ("both", lambda: f"{area()}.{ex()}.{_digits(rng, 4)}"),
        ("heldout", lambda: f"1-{area()}-{ex()}-{_digits(rng, 4)}"),
        ("heldout", lambda: f"+1 ({area()}) {ex()}-{_digits(rng, 4)}"),
    ]


def _gb(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    return [
        ("both", lambda: f"020 {_digits(rng, 4, first='3578')} {_digits(rng, 4)}"),
        ("both", lambda: f"+44 20 {_digits(rng, 4, first='3578')} {_digits(rng, 4)}"),
        ("both", lambda: f"07{_digits(rng, 3)} {_digits(rng, 6)}"),
        ("both", lambda: f"+44 7{_digits(rng, 3)} {_digits(rng, 6)}"),
        ("both", lambda: f"(01{_digits(rng, 3)}) {_digits(rng, 6)}"),
        ("heldout", lambda: f"+44 (0)161 {_digits(rng, 3)} {_digits(rng, 4)}"),
        ("heldout", lambda: f"0161 {_digits(rng, 3)} {_digits(rng, 4)}"),
    ]


def _de(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    def city() -> str:
        return rng.choice(["30", "40", "89", "69", "221", "711", "511", "351", "341", "6221"])

    return [
        ("both", lambda: f"0{city()} {_digits(rng, rng.choice([6, 7, 8]), first='123456789')}"),
        ("both", lambda: f"+49 {city()} {_digits(rng, 7, first='123456789')}"),
        (
            "both",
            lambda: f"01{rng.choice(['51', '52', '57', '60', '62', '70', '71', '76'])} {_digits(rng, 7)}",
        ),
        ("both", lambda: f"+49 1{rng.choice(['51', '60', '71', '76'])} {_digits(rng, 7)}"),
        ("both", lambda: f"(0{city()}) {_digits(rng, 7, first='123456789')}"),
        ("both", lambda: f"0{city()}/{_digits(rng, 7, first='123456789')}"),
        ("both", lambda: f"+49 (0){city()} {_digits(rng, 7, first='123456789')}"),
        ("heldout", lambda: f"0{city()}-{_digits(rng, 7, first='123456789')}"),
        (
            "heldout",
            lambda: f"0{city()} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
        ),
    ]


def _pairs(rng: random.Random, n: int) -> list[str]:
    return [_digits(rng, 2) for _ in range(n)]


def _fr(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    def lead() -> str:
        return rng.choice("1234567")

    return [
        ("both", lambda: f"0{lead()} " + " ".join(_pairs(rng, 4))),
        ("both", lambda: f"+33 {lead()} " + " ".join(_pairs(rng, 4))),
        ("both", lambda: f"+33 (0){lead()} " + " ".join(_pairs(rng, 4))),
        ("both", lambda: f"0{lead()}" + "".join(_pairs(rng, 4))),  # unseparated, as typed on a phone
        ("heldout", lambda: f"0{lead()}." + ".".join(_pairs(rng, 4))),
        ("heldout", lambda: f"+33{lead()}" + "".join(_pairs(rng, 4))),
    ]


def _es(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    return [
        ("both", lambda: f"6{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 3)}"),
        ("both", lambda: f"+34 6{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 3)}"),
        ("both", lambda: f"91 {_digits(rng, 3)} {_digits(rng, 2)} {_digits(rng, 2)}"),
        ("heldout", lambda: f"+34 93 {_digits(rng, 3)} {_digits(rng, 2)} {_digits(rng, 2)}"),
        ("heldout", lambda: f"6{_digits(rng, 8)}"),
    ]


def _it(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    return [
        ("both", lambda: f"+39 06 {_digits(rng, 4)} {_digits(rng, 4)}"),
        ("both", lambda: f"3{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 4)}"),
        ("both", lambda: f"+39 3{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 4)}"),
        ("heldout", lambda: f"02 {_digits(rng, 4)} {_digits(rng, 4)}"),
        ("heldout", lambda: f"3{_digits(rng, 9)}"),
    ]


def _nl(rng: random.Random) -> list[tuple[str, Callable[[], str]]]:
    return [
        ("both", lambda: f"06 {_digits(rng, 8)}"),
        ("both", lambda: f"+31 6 {_digits(rng, 8)}"),
        ("both", lambda: f"020 {_digits(rng, 3)} {_digits(rng, 4)}"),
        ("heldout", lambda: f"06-{_digits(rng, 8)}"),
        ("heldout", lambda: f"+31 (0)20 {_digits(rng, 3)} {_digits(rng, 4)}"),
    ]


PHONES = {"en_US": _us, "en_GB": _gb, "de_DE": _de, "fr_FR": _fr, "es_ES": _es, "it_IT": _it, "nl_NL": _nl}


# --- the other entities ---------------------------------------------------------------------------


def _card(fake: Faker, rng: random.Random) -> str:
    kind = rng.choice(
        ["visa16", "visa16", "mastercard", "mastercard", "amex", "discover", "jcb16", "maestro"]
    )
    number = fake.credit_card_number(card_type=kind)
    style = rng.choice(["space", "space", "dash", "none"])
    if style == "none":
        return number
    sep = " " if style == "space" else "-"
    if len(number) == 15:  # Amex prints 4-6-5
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


def _iban(fake: Faker, rng: random.Random) -> str:
    value = fake.iban()
    if rng.random() < 0.6:
        return " ".join(value[i : i + 4] for i in range(0, len(value), 4))
    return value


def _ip(fake: Faker, rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.45:
        return fake.ipv4_public()
    if pick < 0.75:
        return fake.ipv4_private()
    return ipaddress.IPv6Address(fake.ipv6()).compressed


def _email(fake: Faker, rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return fake.email()
    first, last = fake.first_name().lower(), fake.last_name().lower()
    first = re.sub(r"[^\w]", "", first) or "x"
    last = re.sub(r"[^\w]", "", last) or "y"
    domain = fake.domain_name()
    if pick < 0.7:
        return f"{first}.{last}+{rng.choice(['news', 'shop', 'work', '2024'])}@{domain}"
    if pick < 0.85:
        return f"{first[0]}{last}@mail.{domain}"
    return f"{first.capitalize()}.{last.capitalize()}@{domain}"


# --- hard negatives: numbers that are not personal data --------------------------------------------


def _isbn13(rng: random.Random) -> str:
    body = "978" + _digits(rng, 9)
    total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(body))
    check = (10 - total % 10) % 10
    return f"{body[:3]}-{body[3]}-{body[4:7]}-{body[7:12]}-{check}"


def _isbn10(rng: random.Random) -> str:
    body = _digits(rng, 9)
    total = sum(int(c) * (10 - i) for i, c in enumerate(body))
    check = (11 - total % 11) % 11
    tail = "X" if check == 10 else str(check)
    return f"{body[0]}-{body[1:4]}-{body[4:9]}-{tail}"


def _negative_fillers(rng: random.Random, fake: Faker) -> dict[str, Callable[[], str]]:
    def ver4() -> str:
        return ".".join(str(rng.randint(0, 30 if i else 12)) for i in range(4))

    return {
        "order": lambda: rng.choice(
            [
                f"#{_digits(rng, rng.choice([8, 9, 10]), first='123456789')}",
                f"{_digits(rng, 3)}-{_digits(rng, 7)}-{_digits(rng, 7)}",  # 3-7-7
                f"A{_digits(rng, 9)}",
                f"{rng.randint(2019, 2026)}-{_digits(rng, 6)}",
            ]
        ),
        "case334": lambda: (
            f"{_digits(rng, 3, first='23456789')}-{_digits(rng, 3, first='23456789')}-{_digits(rng, 4)}"
        ),
        "fedex": lambda: rng.choice(
            [
                f"{_digits(rng, 4)} {_digits(rng, 4)} {_digits(rng, 4)}",
                _digits(rng, 12),
                _digits(rng, 15),
                f"{_digits(rng, 4)} {_digits(rng, 4)} {_digits(rng, 4)} {_digits(rng, 3)}",
            ]
        ),
        "ups": lambda: (
            "1Z"
            + "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ0123456789") for _ in range(6))
            + _digits(rng, 10)
        ),
        "usps": lambda: "9400 " + " ".join(_digits(rng, 4) for _ in range(4)) + f" {_digits(rng, 2)}",
        "dhl": lambda: rng.choice(
            [_digits(rng, 10), f"JJD{_digits(rng, 18)}", f"00340434{_digits(rng, 12)}"]
        ),
        "ver4": ver4,
        "ver3": lambda: f"{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}",
        "date": lambda: rng.choice(
            [
                fake.date(pattern="%Y-%m-%d"),
                fake.date(pattern="%m/%d/%Y"),
                fake.date(pattern="%d.%m.%Y"),
                fake.date(pattern="%d/%m/%Y"),
            ]
        ),
        "time": lambda: rng.choice(
            [
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
                f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
            ]
        ),
        "isbn": lambda: rng.choice([_isbn13(rng), _isbn10(rng), "ISBN " + _isbn13(rng).replace("-", "")]),
        "price": lambda: rng.choice(
            [
                f"${rng.randint(1, 9)},{_digits(rng, 3)}.{_digits(rng, 2)}",
                f"€{rng.randint(1, 9)}.{_digits(rng, 3)},{_digits(rng, 2)}",
                f"{rng.randint(1, 9)} {_digits(rng, 3)},{_digits(rng, 2)} €",
                f"£{rng.randint(10, 999)}.{_digits(rng, 2)}",
                f"CHF {rng.randint(1, 9)}'{_digits(rng, 3)}.00",
            ]
        ),
        "invoice": lambda: f"INV-{rng.randint(2019, 2026)}-{_digits(rng, 6)}",
        "sha": lambda: "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice([7, 12, 40]))),
        "uuid": lambda: str(fake.uuid4()),
        "coords": lambda: f"{rng.uniform(-80, 80):.4f}, {rng.uniform(-170, 170):.4f}",
        "bignum": lambda: f"{rng.randint(1, 9)} {_digits(rng, 3)} {_digits(rng, 3)}",
        "serial": lambda: "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(10)),
        "postcode": lambda: rng.choice([_digits(rng, 5), "SW1A 1AA", "75008", "1012 AB"]),
        "ticket": lambda: _digits(rng, rng.choice([5, 6, 7]), first="123456789"),
        "ext": lambda: _digits(rng, 4),
        "giftcard": lambda: " ".join(_digits(rng, 4) for _ in range(4)),
    }


NEGATIVE_TEMPLATES = {
    "dev": {
        "en": [
            "Your order {order} has shipped with FedEx, tracking number {fedex}.",
            "Please upgrade the agent to version {ver4} before Friday.",
            "Case {case334} was escalated to tier 2 support.",
            "The book's ISBN is {isbn}.",
            "It costs {price} including VAT.",
            "Deploy build {ver4} on {date} at {time}.",
            "Reference {invoice} has been overdue since {date}.",
            "Commit {sha} broke the nightly tests.",
            "Ticket #{ticket} was reopened by the customer.",
            "The office is at {coords}.",
            "UPS tracking number {ups} shows it in Louisville.",
            "Request id {uuid} failed with a timeout.",
            "Serial number {serial}, firmware {ver3}.",
            "Your case number is {case334}; please keep it for your records.",
            "USPS says {usps} is out for delivery.",
            "We sold {bignum} units last year.",
        ],
        "de": [
            "Ihre Bestellung {order} wurde mit DHL versandt, Sendungsnummer {dhl}.",
            "Bitte aktualisieren Sie auf Version {ver4}.",
            "Aktenzeichen {case334}, bitte bei Rückfragen angeben.",
            "Der Preis beträgt {price}.",
            "Termin am {date} um {time} Uhr.",
            "Rechnung {invoice} vom {date} ist noch offen.",
            "Die Stadt hat {bignum} Einwohner.",
        ],
        "fr": [
            "Votre commande {order} a été expédiée, numéro de suivi {fedex}.",
            "Mettez à jour vers la version {ver4}.",
            "Dossier n° {case334} transmis au service juridique.",
            "Prix : {price}",
            "La ville compte {bignum} habitants.",
            "Rendez-vous le {date} à {time}.",
        ],
        "es": [
            "Su pedido {order} ha sido enviado, número de seguimiento {fedex}.",
            "Actualice a la versión {ver4}.",
            "Expediente {case334} en revisión.",
            "El precio es {price}.",
        ],
        "it": ["Il tuo ordine {order} è stato spedito.", "Aggiorna alla versione {ver4}."],
        "nl": ["Je bestelling {order} is verzonden, trackingcode {dhl}.", "Update naar versie {ver4}."],
    },
    "heldout": {
        "en": [
            "Firmware {ver4} is out; release notes dated {date}.",
            "Claim number {case334} is pending review.",
            "Tracking: {fedex}",
            "ISBN-13 {isbn}, second edition.",
            "Subtotal {price}, shipping free.",
            "Your gift card {giftcard} has been activated.",
            "Order {order} (invoice {invoice}) was refunded.",
            "Node {ver4} of the cluster went down at {time}.",
            "Run {sha} took {ticket} ms.",
            "Support case {case334} - status: resolved.",
        ],
        "de": [
            "Lieferschein {order}, Paketnummer {dhl}.",
            "Softwarestand {ver4} vom {date}.",
            "Vorgangsnummer {case334}.",
        ],
        "fr": [
            "Référence client {order}, facture {invoice}.",
            "Build {ver4} déployé le {date}.",
            "Affaire n° {case334}.",
        ],
        "es": ["Número de caso {case334}.", "Compilación {ver4} publicada el {date}."],
        "it": ["Pratica n. {case334}.", "Versione {ver4} rilasciata il {date}."],
        "nl": ["Zaaknummer {case334}.", "Versie {ver4} staat klaar."],
    },
}

POSITIVE_TEMPLATES = {
    "dev": {
        "en": [
            "You can reach me at {phone}.",
            "My email is {email} and my cell is {phone}.",
            "Please wire the deposit to {iban}.",
            "Charge it to my card {credit_card}, expiry 09/27.",
            "The server at {ip_address} is refusing SSH connections.",
            "Contact {name} ({email}, {phone}) about the invoice.",
            "Call me on {phone} after 6pm about order {order}.",
            "Refund to IBAN {iban}, account holder {name}.",
            "Send the report to {email} by {date}.",
            "Whitelist {ip_address} in the firewall please, ticket {ticket}.",
        ],
        "de": [
            "Sie erreichen mich unter {phone}.",
            "Meine E-Mail ist {email}, Handy {phone}.",
            "Bitte überweisen Sie den Betrag auf {iban}.",
            "Meine Kreditkarte: {credit_card}",
            "Der Server {ip_address} antwortet nicht.",
            "Rückruf bitte an {phone} wegen Bestellung {order}.",
        ],
        "fr": [
            "Vous pouvez me joindre au {phone}.",
            "Mon adresse e-mail : {email}, portable : {phone}.",
            "Virement sur le compte {iban} s'il vous plaît.",
            "Ma carte bancaire : {credit_card}",
            "Le serveur {ip_address} ne répond plus.",
            "Rappelez-moi au {phone} pour la commande {order}.",
        ],
        "es": [
            "Puede llamarme al {phone}.",
            "Mi correo es {email} y mi móvil {phone}.",
            "Transfiera a la cuenta {iban}.",
            "Mi tarjeta es {credit_card}.",
            "El servidor {ip_address} no responde.",
        ],
        "it": ["Potete chiamarmi al {phone}.", "La mia email è {email}.", "Bonifico sull'IBAN {iban}."],
        "nl": [
            "Je kunt me bereiken op {phone}.",
            "Mijn e-mailadres is {email}.",
            "Maak het over naar {iban}.",
        ],
    },
    "heldout": {
        "en": [
            "Text me: {phone}",
            "{name} <{email}>",
            "ping {ip_address} and tell me the latency",
            "my visa is {credit_card} cvv 123",
            "New bank details for payroll: {iban}",
            "Phone {phone} / alt. {phone}",
            "reach out via {email} or {phone} (case {case334})",
            "Card on file {credit_card}; billing email {email}.",
        ],
        "de": [
            "Tel.: {phone}",
            "Kontakt: {email}",
            "IBAN: {iban} (Kontoinhaber {name})",
            "Meine Nummer hat sich geändert, neu: {phone}",
        ],
        "fr": [
            "Tél. : {phone}",
            "Écrivez-moi à {email}",
            "RIB : {iban}",
            "Mon numéro : {phone}, version {ver4}",
        ],
        "es": ["Teléfono: {phone}", "Escríbeme a {email}", "IBAN {iban}"],
        "it": ["Cell. {phone}", "Scrivimi a {email}", "Tel {phone}"],
        "nl": ["Tel: {phone}", "Mail me op {email}", "Rekeningnummer {iban}"],
    },
}

VARIANTS = ("plain", "zero_width", "soft_hyphen", "fullwidth", "nbsp")
VARIANT_WEIGHTS = (0.7, 0.075, 0.075, 0.075, 0.075)


def _obfuscate(value: str, variant: str, rng: random.Random) -> str:
    """What pasted or hostile text does to a number: invisible characters inside, fullwidth digits,
    non-breaking spaces between the groups."""
    if variant == "fullwidth":
        return "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in value)
    if variant == "nbsp" and " " in value:
        return value.replace(" ", rng.choice(["\u00a0", "\u202f"]))
    if variant in ("zero_width", "soft_hyphen", "nbsp"):
        char = "\u00ad" if variant == "soft_hyphen" else "\u200b"
        inner = [i for i in range(1, len(value)) if value[i - 1].isdigit() and value[i].isdigit()]
        for index in sorted(rng.sample(inner, min(len(inner), rng.choice([1, 2]))), reverse=True):
            value = value[:index] + char + value[index:]
        return value
    return value


def _render(template: str, fill: Callable[[str], tuple[str, str | None]]) -> tuple[str, list[list[Any]]]:
    out: list[str] = []
    spans: list[list[Any]] = []
    cursor = 0
    length = 0
    for match in _SLOT.finditer(template):
        literal = template[cursor : match.start()]
        out.append(literal)
        length += len(literal)
        value, gold = fill(match.group(1))
        if gold:
            spans.append([length, length + len(value), gold])
        out.append(value)
        length += len(value)
        cursor = match.end()
    out.append(template[cursor:])
    return "".join(out), spans


def pii_items(split: str = "dev") -> list[dict[str, Any]]:
    seed = SEEDS[split]
    rng = random.Random(seed)
    positives, negatives = COUNTS[split]
    fakers = {}
    for locale in LOCALES:
        fake = Faker(locale)
        fake.seed_instance(seed + len(fakers))
        fakers[locale] = fake
    phone_formats = {
        locale: [fmt for where, fmt in build(rng) if where == "both" or split == "heldout"]
        for locale, build in PHONES.items()
    }
    items: list[dict[str, Any]] = []
    locales = list(LOCALES)
    for index in range(positives + negatives):
        negative = index >= positives
        locale = locales[index % len(locales)]
        lang = LOCALES[locale]
        fake = fakers[locale]
        fillers = _negative_fillers(rng, fake)
        pool = (NEGATIVE_TEMPLATES if negative else POSITIVE_TEMPLATES)[split][lang]
        template = rng.choice(pool)
        variant = "plain" if negative else rng.choices(VARIANTS, VARIANT_WEIGHTS)[0]

        def fill(
            slot: str,
            *,
            fake: Faker = fake,
            fillers: dict = fillers,
            locale: str = locale,
            variant: str = variant,
        ) -> tuple[str, str | None]:
            if slot == "name":
                return fake.name(), None
            if slot in fillers:
                return fillers[slot](), None
            value = {
                "phone": lambda: rng.choice(phone_formats[locale])(),
                "email": lambda: _email(fake, rng),
                "credit_card": lambda: _card(fake, rng),
                "iban": lambda: _iban(fake, rng),
                "ip_address": lambda: _ip(fake, rng),
            }[slot]()
            if slot == "ip_address" and rng.random() < 0.15 and ":" not in value:
                value += f":{rng.choice([22, 443, 5432, 8080])}"  # the port is not part of the address
                return value, slot  # span fixed below
            if slot != "email":
                value = _obfuscate(value, variant, rng)
            return value, slot

        text, spans = _render(template, fill)
        for span in spans:  # an address with a port: the gold span stops before ":port"
            if span[2] == "ip_address":
                value = text[span[0] : span[1]]
                if re.search(r":\d{2,4}$", value) and value.count(":") == 1:
                    span[1] -= len(value) - value.rindex(":")
        items.append(
            {
                "id": f"pii-{split}-{index}",
                "split": split,
                "lang": lang,
                "locale": locale,
                "text": text,
                "spans": spans,
                "variant": variant,
                "negative": negative,
            }
        )
    return items
