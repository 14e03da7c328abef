"""The review queue's forms: a verdict and a note, for a blocked turn (`ReviewForm`; `ReviewNoteForm`
alone when the verdict is the admin action's) and for a quarantined message (`FlagReviewForm`)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from memproc import models

Status = models.TripwireLog.Status


class ReviewNoteForm(forms.Form):
    note = forms.CharField(
        label=_("Note"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        help_text=_("Why this block was right or wrong; kept with the log."),
    )


class ReviewForm(ReviewNoteForm):
    status = forms.ChoiceField(label=_("Verdict"), choices=Status.choices, widget=forms.RadioSelect)

    field_order = ("status", "note")


class FlagReviewForm(ReviewNoteForm):
    status = forms.ChoiceField(
        label=_("Verdict"),
        choices=[
            ("confirmed", _("Confirmed: keep it out of history and recall")),
            ("cleared", _("Cleared: a false alarm, let it back into memory")),
            ("flagged", _("Flagged: undecided, keep it out for now")),
        ],
        widget=forms.RadioSelect,
    )

    field_order = ("status", "note")
