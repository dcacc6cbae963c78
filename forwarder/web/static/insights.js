// Findings: a "Copy SQL" button per fix. Without JavaScript the buttons stay hidden and the SQL in
// its <pre> is selectable as it is.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  if (!navigator.clipboard) return;
  document.querySelectorAll("button.copy-sql").forEach((button) => {
    button.hidden = false;
    button.addEventListener("click", async () => {
      const source = document.getElementById(button.dataset.copy);
      if (!source) return;
      try {
        await navigator.clipboard.writeText(source.textContent);
        button.textContent = "Copied";
      } catch (err) {
        button.textContent = "Copy failed: select the SQL";
      }
      setTimeout(() => { button.textContent = "Copy SQL"; }, 2000);
    });
  });
});
