"""PIIDetector's rules on the ways people write personal data: national phone formats of the eight
locales it knows, US SSNs without dashes when the words say so, secrets after a key name, e-mail
addresses spelled out with "at" and "dot". Each has hard negatives: numbers and words that look alike."""

from __future__ import annotations

import pytest

from memproc.exceptions import TripWire
from memproc.guardrails import PIIDetector

from .conftest import make_ctx, run_stream, split_every, streamed_text, user


def found(text: str, **kwargs) -> list[tuple[str, str]]:
    return [(m.type, text[m.start : m.end]) for m in PIIDetector(**kwargs).detect(text)]


# --- phone numbers --------------------------------------------------------------------------------

PHONES = {
    "en_US": [
        "(212) 555-0147",
        "(212)555-0147",
        "212-555-0147",
        "212.555.0147",
        "212 555 0147",
        "+1 212 555 0147",
        "+1-212-555-0147",
        "+1.212.555.0147",
        "+1 (212) 555-0147",
        "1-800-555-0199",
        "1 (800) 555-0199",
        "001-212-555-0147",
        "+12125550147",
        "212-555-0147 x1234",
        "(212) 555-0147 ext. 12",
        "+1-212-555-0147x123",
    ],
    "en_GB": [
        "020 7946 0958",
        "020-7946-0958",
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "+44(0)20 7946 0958",
        "+44-20-7946-0958",
        "0044 20 7946 0958",
        "07700 900123",
        "+44 7700 900123",
        "+447700900123",
        "0161 496 0066",
        "(0161) 496 0066",
        "(0161)4960066",
        "01632 960001",
        "0800 123 4567",
    ],
    "de_DE": [
        "030 1234567",
        "030/1234567",
        "030-1234567",
        "(030) 1234567",
        "+49 30 1234567",
        "+49 (0)30 1234567",
        "+49(0)30 1234567",
        "+49-30-1234567",
        "0049 30 1234567",
        "0151 23456789",
        "+49 151 23456789",
        "089 12 34 56 78",
        "+49 30 12345-678",
    ],
    "fr_FR": [
        "01 23 45 67 89",
        "01.23.45.67.89",
        "04-72-11-35-90",
        "+33 1 23 45 67 89",
        "+33 (0)1 23 45 67 89",
        "+33 6 12 34 56 78",
        "+33.1.23.45.67.89",
        "0033 1 23 45 67 89",
        "+33 612345678",
    ],
    "es_ES": [
        "612 345 678",
        "612 34 56 78",
        "612-345-678",
        "612.345.678",
        "91 123 45 67",
        "912 345 678",
        "+34 612 345 678",
        "+34 91 123 45 67",
        "+34-612-345-678",
        "0034 612 345 678",
        "(+34) 612 345 678",
    ],
    "it_IT": [
        "06 1234 5678",
        "02 1234 5678",
        "06/12345678",
        "0521 123456",
        "+39 06 1234 5678",
        "+39 02 12345678",
        "333 123 4567",
        "333-123-4567",
        "333.1234567",
        "+39 333 123 4567",
        "0039 333 1234567",
    ],
    "nl_NL": [
        "06 12345678",
        "06-12345678",
        "06 1234 5678",
        "+31 6 12345678",
        "0031 6 12345678",
        "020 123 4567",
        "020-1234567",
        "(020) 123 4567",
        "010-123 45 67",
        "+31 (0)20 123 4567",
        "+31 20 123 4567",
    ],
    "pt_PT": [
        "912 345 678",
        "961 234 567",
        "21 123 4567",
        "22 123 4567",
        "+351 912 345 678",
        "+351 21 123 4567",
        "+351 212 345 678",
        "00351 912 345 678",
        "(+351) 912 345 678",
    ],
}


@pytest.mark.parametrize(
    "number", [pytest.param(n, id=f"{locale}:{n}") for locale, ns in PHONES.items() for n in ns]
)
@pytest.mark.parametrize("carrier", ["Please note {} for later.", "My phone: {}.", "{}"])
def test_national_phone_formats_are_found_whole(number, carrier):
    text = carrier.format(number)
    assert found(text) == [("phone", number)]


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("Ruf mich an: 030 1234567 (Büro)", "030 1234567"),
        ("Appelez-moi au 06.12.34.56.78, merci", "06.12.34.56.78"),
        ("Ligue para o telemóvel 912345678.", "912345678"),
        ("Call me at 2125550147.", "2125550147"),
        ("Mobil: 0151 23456789 oder E-Mail", "0151 23456789"),
    ],
)
def test_phone_numbers_in_running_text(text, number):
    assert found(text) == [("phone", number)]


@pytest.mark.parametrize(
    "text",
    [
        "Order 212-555-0147 shipped yesterday.",
        "Encomenda n.º 912 345 678 enviada.",
        "The invoice total is 212 345 678 €.",
        "Released on 12.03.2024 at 10:30.",
        "Version 10.2.3.4 fixes the crash.",
        "ISBN 0-306-40615-2 is on the shelf.",
        "Our reference 2125550147 is on the letter.",
        "Resolution 1920x1080 at 60 Hz.",
    ],
)
def test_phone_lookalikes_are_not_flagged(text):
    assert found(text) == []


# --- US social security numbers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("My SSN is 123456789.", "123456789"),
        ("SSN: 123 45 6789", "123 45 6789"),
        ("social security number 078051120 on file", "078051120"),
        ("Social Security No. 219 09 9999", "219 09 9999"),
        ("ss#: 123.45.6789", "123.45.6789"),
        ("her SSN, 123456789, was wrong", "123456789"),
        ("ssn 123-45-6789", "123-45-6789"),
    ],
)
def test_ssns_without_dashes_are_found_when_the_words_say_so(text, value):
    assert found(text) == [("us_ssn", value)]


@pytest.mark.parametrize(
    "text",
    [
        "Order 123456789 shipped.",
        "The total was 123456789 units.",
        "SSN: 000123456 is not issued.",  # area 000
        "SSN 666 12 3456 is never issued.",
        "SSN 900-12-3456 and 123 00 4567 are never issued.",
        "Build 123456789 passed; see the SSN policy page.",  # the cue names the page, after the number
        "My SSN policy number is 1234567890.",  # ten digits
    ],
)
def test_nine_digit_numbers_without_an_ssn_cue_are_not_ssns(text):
    assert [k for k, _ in found(text)] == []


# --- secrets after a key name ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("password: hunter2", "hunter2"),
        ("Password: K#9x_Lm2@q", "K#9x_Lm2@q"),
        ("passwd=Tr0ub4dor&3", "Tr0ub4dor&3"),
        ("pwd = 's3cr3t!!'", "s3cr3t!!"),
        ("my password is Summer2024!", "Summer2024!"),
        ('{"password": "p@ssw0rd123"}', "p@ssw0rd123"),
        ("DB_PASSWORD=correcthorse", "correcthorse"),
        ("token=ab12cd34ef56gh78", "ab12cd34ef56gh78"),
        ("access_token: 9f8e7d6c5b4a39281706", "9f8e7d6c5b4a39281706"),
        ("secret: R2d2C3po!", "R2d2C3po!"),
        ("client_secret=Xy7_pq91Lm", "Xy7_pq91Lm"),
        ("Authorization: Bearer abc123def456ghi789", "abc123def456ghi789"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("Passwort: Sonne123", "Sonne123"),
        ("mot de passe : Chat#2023", "Chat#2023"),
        ("contraseña: Gato_1999", "Gato_1999"),
        ("wachtwoord=Fiets!42", "Fiets!42"),
        ("a senha é Lisboa#77", "Lisboa#77"),
        ("its password was 'NetWork_789'", "NetWork_789"),
        ("user ada with password Qr7!dke#39 logged in", "Qr7!dke#39"),
        ("her password 'B@nZes94!' leaked", "B@nZes94!"),
        ("das Passwort war Sommer2024", "Sommer2024"),
    ],
)
def test_secrets_after_a_key_name_are_found(text, value):
    assert found(text) == [("secret", value)]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("api_key=abcd1234efgh5678", "abcd1234efgh5678"),
        ("x-api-key: 0123456789abcdef0123", "0123456789abcdef0123"),
        ("API key: ZXhhbXBsZWtleTEyMw", "ZXhhbXBsZWtleTEyMw"),
    ],
)
def test_values_after_an_api_key_name_are_api_keys(text, value):
    assert found(text) == [("api_key", value)]


@pytest.mark.parametrize(
    "text",
    [
        "Your password is incorrect.",
        "The password is required; a token is sent by SMS.",
        "password: ********",
        "password: <your password>",
        "password=${DB_PASSWORD}",
        "password = os.environ['DB_PASSWORD']",
        "Password: required",
        "Reset your password at the login page.",
        "token: none",
        "The secret is to whisk the eggs slowly.",
        "max tokens: 4096",
        "Enter your password: [REDACTED:secret]",
        "Use a password manager and turn on password reset.",
        "The password Policy changed; passwords need 12 characters.",
        "Your password was changed yesterday.",
        "Pick a password with 2FA enabled.",
    ],
)
def test_words_after_a_key_name_that_are_not_secrets(text):
    assert found(text) == []


def test_secret_is_a_type_to_choose_and_block_on():
    assert found("password: hunter2 mail a@example.com", types=["email"]) == [("email", "a@example.com")]
    with pytest.raises(TripWire) as info:
        PIIDetector(strategy="block").process_input(make_ctx(new=[user("passwd=Tr0ub4dor&3")]))
    assert info.value.metadata["types"] == ["secret"]
    assert "Tr0ub4dor" not in info.value.reason + repr(info.value.metadata)


def test_password_is_an_alias_of_secret():
    assert found("password: hunter2", types=["password"]) == [("secret", "hunter2")]


def test_secret_redaction_keeps_the_key_name():
    ctx = make_ctx(new=[user("login admin, password: hunter2, then token=ab12cd34ef56gh78")])
    text = PIIDetector().process_input(ctx)[0].text
    assert text == "login admin, password: [REDACTED:secret], then token=[REDACTED:secret]"


@pytest.mark.parametrize("size", [1, 3, 5])
def test_a_streamed_secret_is_never_released(size):
    text = "Use passwd=Tr0ub4dor&3 and Authorization: Bearer abc123def456ghi789 now."
    out = streamed_text(run_stream(PIIDetector(), split_every(text, size)))
    assert "Tr0ub4dor" not in out and "abc123" not in out


# --- e-mail addresses spelled out -----------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "john.doe [at] example [dot] com",
        "john.doe[at]example[dot]com",
        "john.doe (at) example (dot) co (dot) uk",
        "john.doe {at} example {dot} org",
        "john.doe AT example DOT com",
        "john.doe at example dot com",
        "jdoe42 at mail dot example dot de",
        "john.doe [at] example.com",
        "john.doe(@)example(.)com",
    ],
)
def test_spelled_out_email_addresses_are_found(address):
    text = f"Write to {address} please."
    assert found(text) == [("email", address)]


@pytest.mark.parametrize(
    "text",
    [
        "Meet me at the station dot five.",
        "I arrived at home dot com was down.",
        "Look at example dot com for details.",
        "We met at noon, then at the office.",
        "Connect the dots at the end.",
        "Prices at store dot com start at 5.",
        "Write to john at example dot com",  # a bare name needs an e-mail word before it: see below
        "She is at work dot net? No idea.",
    ],
)
def test_ordinary_at_and_dot_are_not_email_addresses(text):
    assert found(text) == []


def test_a_bare_name_spelled_out_needs_an_email_word():
    assert found("E-mail: john at example dot com") == [("email", "john at example dot com")]


def test_a_card_shaped_number_glued_to_letters_is_an_account_reference():
    assert found("recipient account 'SBIN567890123456' (routing HDFC0001234)") == []
    assert found("card:4111111111111111") == [("credit_card", "4111111111111111")]


@pytest.mark.parametrize("size", [1, 2, 4, 7])
def test_a_streamed_spelled_out_address_is_redacted_whole(size):
    text = "Write to john.doe [at] example [dot] com or jdoe42 at mail dot example dot de, thanks."
    out = streamed_text(run_stream(PIIDetector(), split_every(text, size)))
    assert out == "Write to [REDACTED:email] or [REDACTED:email], thanks."


@pytest.mark.parametrize("size", [1, 3])
def test_a_streamed_value_keeps_the_words_that_make_it_personal_data(size):
    text = "Tel. 0612345678 ok, and my SSN is 123456789 too."
    out = streamed_text(run_stream(PIIDetector(), split_every(text, size)))
    assert out == "Tel. [REDACTED:phone] ok, and my SSN is [REDACTED:us_ssn] too."


@pytest.mark.parametrize(
    "text",
    [
        "Tel. 0612345678 ok.",
        "my SSN is 123 45 6789, thanks",
        "login: passwd=Tr0ub4dor&3 then",
        "Authorization: Bearer abc123def456ghi789 sent",
        "mail john.doe [at] example [dot] com now",
        "or jdoe42 at mail dot example dot de, bye",
        "ring (212)555-0147 x1234 soon",
    ],
)
def test_a_new_kind_of_value_split_at_any_point_is_redacted_as_a_whole_text_would_be(text):
    guard = PIIDetector()
    whole = guard.redact(text, guard.detect(text))
    assert "[REDACTED:" in whole
    for cut in range(1, len(text)):
        assert streamed_text(run_stream(PIIDetector(), [text[:cut], text[cut:]])) == whole, cut
