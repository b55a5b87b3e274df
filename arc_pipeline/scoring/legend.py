"""The legend printed under every metric table (markdown and HTML): what the less obvious columns count.

"valid code 100%" beside 6% SyntaxError reads as a contradiction unless one knows that the column only
says a fenced code block was found, not that it parses or runs.
"""

METRICS_LEGEND = (
    "Legend: valid code = a code block was present in the answer (it may still fail to parse or run); "
    "valid outputs = share of predictions whose program ran without error; unique outputs = distinct output "
    "sets per prediction; *_pixel_score / *_correct_grids = mean share of pixels / grids right; *_pass_rate = "
    "share of predictions right on all grids; *_is_correct = some prediction right; is_correct = some "
    "prediction right on train and some on test; solved = one single prediction right on both."
)


def with_legend(markdown_table: str) -> str:
    """The table, a blank line, then the legend (outside the table: the columns stay exactly as they are)."""
    return markdown_table.rstrip("\n") + "\n\n" + METRICS_LEGEND + "\n"
