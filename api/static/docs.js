/* Starts the bundled Swagger UI on /docs (api/docs.py); a file, not an inline script, so
   the Content Security Policy holds on this page too. No validator badge: it would send
   the schema to validator.swagger.io. */
"use strict";

(() => {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
})();
